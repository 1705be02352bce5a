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

# The engine tests' own regression (tests/owned/values.py) and multi-label module
# (tests/owned/multilabel.py), each with the metric it is judged by.
OWNED_VALUES = (
    f"hydra.searchpath=[file://{TEST_CONF}]",
    "data=owned_values",
    "model=owned_values",
    "monitor.metric=val/mae",
    "monitor.mode=min",
)
OWNED_LABELS = (
    f"hydra.searchpath=[file://{TEST_CONF}]",
    "data=owned_labels",
    "model=owned_multilabel",
    "monitor.metric=val/loss",
    "monitor.mode=min",
)

# A run without screen output or stopping rules: no config print, sanity check, early stopping,
# progress bar or model summary. For runs that tests compare exactly, kill or resume.
QUIET_RUN = (
    "print_config=false",
    "trainer.num_sanity_val_steps=0",
    "callbacks.early_stopping=null",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
)


# The run the tests mean when they name no data, model or monitor: the digits example, as
# conf/train.yaml ships it. Written out here, so that a cloner who points conf/train.yaml's defaults
# at their own project (docs/your-project.md) changes what `scripts/train.py` trains, not what
# these tests check; a clone that then deletes the digits example skips the tests that use it.
BASELINE = (
    ("data", "data=digits"),
    ("model", "model=digits_cnn"),
    ("monitor", "monitor.metric=val/acc"),
    ("monitor", "monitor.mode=max"),
)
BASELINE_MODULES = (
    "project.data.digits",
    "project.models.digits_cnn",
    "project.tasks.classification",
)
# Scripts and configs that compose train.yaml's defaults (eval.py reads the trained run's config).
BASELINE_SCRIPTS = ("train.py", "doctor.py")
BASELINE_CONFIGS = ("train", "doctor")


def _chosen(override: str) -> str:
    """The group or top-level node an override sets: `+model.net.width=8` -> `model`."""
    key = override.lstrip("+~").split("=", 1)[0]
    return key.split(".", 1)[0].split("/", 1)[0]


def with_baseline(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """`overrides` after the baseline entries they leave open. An experiment chooses all three
    (data, model and the monitor it is judged by); `data=...` or `model=...` chooses that group,
    any `monitor.*` the monitor. A group the overrides only tune (`model.net.width=8`) is still
    the baseline's."""
    chosen = set()
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key == "experiment" or (key == "hparams_search" and _searches_an_experiment(override)):
            chosen |= {"data", "model", "monitor"}
        elif key in ("data", "model"):
            chosen.add(key)
        elif _chosen(override) == "monitor":
            chosen.add("monitor")
    pins = [pin for group, pin in BASELINE if group not in chosen]
    if any(group in ("data", "model") for group, pin in BASELINE if pin in pins):
        _skip_if_deleted()
    # Among the other overrides: a script's command line takes them as one run of positionals
    # (`-m` and other flags before or after them).
    at = next((i for i, o in enumerate(overrides) if "=" in o and not o.startswith("-")), 0)
    return [*overrides[:at], *pins, *overrides[at:]]


def _searches_an_experiment(override: str) -> bool:
    """`hparams_search=<name>` whose config selects an experiment (a search over the default run
    selects none)."""
    name = override.split("=", 1)[1]
    path = CONF / "hparams_search" / f"{name}.yaml"
    return path.is_file() and "/experiment:" in path.read_text()


def _skip_if_deleted() -> None:
    import pytest

    from tests.helpers.example_marks import deleted

    gone = deleted(list(BASELINE_MODULES))
    if gone:
        pytest.skip(f"uses {', '.join(gone)}, deleted (the tests' baseline run)")


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
    if config_name in BASELINE_CONFIGS:
        given = tuple(with_baseline(given))
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
