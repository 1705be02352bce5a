"""The real config tree, composed as scripts/train.py would compose it."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from trainwell.training.compose import compose_run_config

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
# The engine tests' own config groups (tests/conf): data=owned, model=owned (tests/owned/).
TEST_CONF = REPO / "tests" / "conf"

# The engine tests' own small modules in place of the examples: a run that needs nothing of
# `project`, so it still works after a cloner deletes the examples (tests/test_deletion.py).
# Subprocess runs also need the repo root on PYTHONPATH (tests.helpers.scripts.TESTS_IMPORTABLE).
OWNED = (f"hydra.searchpath=[file://{TEST_CONF}]", "data=owned", "model=owned")

# A run without screen output or stopping rules: no config print, sanity check, early stopping,
# progress bar or model summary. For runs that tests compare exactly, kill or resume.
QUIET_RUN = (
    "print_config=false",
    "trainer.num_sanity_val_steps=0",
    "callbacks.early_stopping=null",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
)


def compose_config(
    overrides: list[str] | None = None, run_dir: Path | None = None, config_name: str = "train"
) -> DictConfig:
    """The config train.py would see for these overrides, with the run dir pinned to `run_dir`."""
    output_dir = run_dir or REPO / "logs" / "pytest"
    return compose_run_config(CONF, overrides or [], output_dir, REPO, config_name)


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

# The same exact-equality setting on the engine tests' own modules (smooth Tanh net, plain SGD,
# constant LR, fp32).
OWNED_SMOOTH_SGD = (
    *OWNED,
    "model.optimizer.momentum=0.0",
    "model.optimizer.nesterov=false",
    "model.optimizer.weight_decay=0.0",
    "model.scheduler=null",
    "trainer.num_sanity_val_steps=0",
    "trainer.deterministic=true",
)
