"""The real config tree, composed as scripts/train.py would compose it."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

import trainwell.resolvers  # noqa: F401  (the config tree uses trainwell's resolvers)

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"


def compose_config(
    overrides: list[str] | None = None, run_dir: Path | None = None, config_name: str = "train"
) -> DictConfig:
    """The config train.py would see for these overrides, with the run dir pinned to `run_dir`."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=list(overrides or []))
    with open_dict(cfg):
        cfg.paths.root_dir = str(REPO)
        cfg.paths.output_dir = str(run_dir or REPO / "logs" / "pytest")
    return cfg


# A smooth, normalisation-free net and SGD without momentum, weight decay or schedule, in fp32:
# one step's update is lr x gradient, so equal gradients give equal weights (conf/model/mlp.yaml
# says why not a ReLU ResNet). For exact-equality checks across accumulation and world sizes.
SMOOTH_SGD_MLP = (
    "model=mlp",
    "model.optimizer.momentum=0.0",
    "model.optimizer.nesterov=false",
    "model.optimizer.weight_decay=0.0",
    "model.scheduler=null",
    "data=synthetic",
    "trainer.num_sanity_val_steps=0",
    "trainer.deterministic=true",
)
