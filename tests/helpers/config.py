"""The real config tree, composed as scripts/train.py would compose it."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from omegaconf import DictConfig, open_dict

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


# Composed configs of this process, by config name, overrides and the state of the config files.
_COMPOSED: dict[tuple, DictConfig] = {}
_SEARCH_DIR = re.compile(r"file://([^,\]]+)")


def _config_files(overrides: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    """Every config file composing may read (conf/ and each `file://` search dir of the
    overrides), with its modification time and size: a file a test writes changes the key."""
    roots = [CONF, *(Path(d) for o in overrides for d in _SEARCH_DIR.findall(o))]
    return tuple(
        (str(p), p.stat().st_mtime_ns, p.stat().st_size)
        for root in roots
        for p in sorted(root.rglob("*.yaml"))
    )


def compose_config(
    overrides: list[str] | None = None, run_dir: Path | None = None, config_name: str = "train"
) -> DictConfig:
    """The config train.py would see for these overrides, with the run dir pinned to `run_dir`.

    Composing takes 0.15-0.3 s on 2 cores and the suite asks for the same few hundred configs
    again and again (half of its ~400 calls repeat one), so each is composed once per process;
    every call gets its own copy, whose run dir is then pinned (nothing else of the composed
    config depends on it)."""
    output_dir = run_dir or REPO / "logs" / "pytest"
    given = tuple(overrides or [])
    key = (config_name, given, _config_files(given))
    if key not in _COMPOSED:
        _COMPOSED[key] = compose_run_config(CONF, given, output_dir, REPO, config_name)
    cfg = copy.deepcopy(_COMPOSED[key])
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
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
