"""What a training run installs: `template_callbacks`, in its documented order, and nothing else.

`build_trainer` adds no callback of its own: the Trainer it builds holds the callbacks it was given
plus whatever a plain `lightning.Trainer` adds for the same flags (a default ModelCheckpoint,
progress bar and model summary when none was given, a Timer for `max_time`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import pytest
from hydra.utils import get_class
from lightning.pytorch.callbacks import ModelCheckpoint, RichModelSummary, RichProgressBar, Timer
from omegaconf import DictConfig

from tests.helpers.config import compose_config
from trainwell.callbacks import LastCheckpoint, ThroughputLogger
from trainwell.callbacks.accumulation import ExactAccumulation
from trainwell.callbacks.checkpoint_rehearsal import CheckpointRehearsal
from trainwell.callbacks.learning_rate import LearningRateLogger
from trainwell.callbacks.preemption import PreemptionCheckpoint
from trainwell.callbacks.training_state import ExactResume
from trainwell.callbacks.validation_history import ValidationHistory
from trainwell.io.background_writes import BackgroundCheckpointWrites
from trainwell.training.builders import build_trainer, template_callbacks
from trainwell.training.monitored_metric import MonitoredMetricCheck
from trainwell.training.plan_callback import TrainingPlanner

# The Trainer arguments with which Lightning adds callbacks of its own (callback_connector.py).
CALLBACK_FLAGS = ("enable_checkpointing", "enable_progress_bar", "enable_model_summary", "max_time")
NO_DEFAULTS = {
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def types(callbacks: list[L.Callback]) -> list[type]:
    return [type(c) for c in callbacks]


def configured(cfg: DictConfig) -> list[type]:
    """The classes of the config's `callbacks` entries, in config order (null entries are off)."""
    return [get_class(node._target_) for node in cfg.callbacks.values() if node is not None]


def plain_trainer(cfg: DictConfig, callbacks: list[L.Callback], **flags: Any) -> L.Trainer:
    """Lightning's Trainer with the same callbacks and the same callback-adding flags."""
    settings = {k: cfg.trainer.get(k) for k in CALLBACK_FLAGS if cfg.trainer.get(k) is not None}
    settings.update(flags)
    return L.Trainer(
        callbacks=callbacks, logger=False, default_root_dir=cfg.paths.output_dir, **settings
    )


def given(kind: str, cfg: DictConfig, run_dir: Path) -> list[L.Callback]:
    if kind == "template":
        return template_callbacks(cfg, run_dir, TrainingPlanner(), has_logger=False)
    if kind == "one":
        return [ExactResume()]
    return []


@pytest.mark.parametrize(
    ("kind", "flags", "lightning_adds"),
    [
        # A training run: the template supplies checkpoint, bar and summary; Lightning adds none.
        ("template", {}, []),
        ("none", {}, [RichProgressBar, RichModelSummary, ModelCheckpoint]),
        ("none", NO_DEFAULTS, []),
        ("one", {**NO_DEFAULTS, "max_time": "00:00:10:00"}, [Timer]),
    ],
)
def test_build_trainer_adds_no_callback(
    kind: str, flags: dict, lightning_adds: list[type], tmp_path: Path
) -> None:
    cfg = compose_config([], tmp_path / "run")
    callbacks = given(kind, cfg, tmp_path / "run")
    # Separate lists: Lightning appends its defaults to the list it is handed.
    built = build_trainer(cfg, callbacks=list(callbacks), logger=False, **flags)
    plain = plain_trainer(cfg, list(callbacks), **flags)

    assert types(built.callbacks) == types(plain.callbacks)
    # Every callback given is installed once, the same object (not a copy or a replacement).
    mine = [c for c in built.callbacks if any(c is g for g in callbacks)]
    assert len(mine) == len(callbacks)
    assert {id(c) for c in mine} == {id(c) for c in callbacks}
    # The rest is Lightning's own defaults for these flags, and only those.
    extra = [c for c in built.callbacks if not any(c is g for g in callbacks)]
    assert types(extra) == lightning_adds


def test_template_callbacks_in_documented_order(tmp_path: Path) -> None:
    cfg = compose_config([], tmp_path / "run")
    plan = TrainingPlanner()
    callbacks = template_callbacks(cfg, tmp_path / "run", plan)

    assert types(callbacks) == [
        ExactAccumulation,
        TrainingPlanner,
        ExactResume,
        MonitoredMetricCheck,
        ValidationHistory,
        *configured(cfg),
        PreemptionCheckpoint,
        BackgroundCheckpointWrites,
        CheckpointRehearsal,
    ]
    assert callbacks[1] is plan  # the caller's planner: run.py's optimizer factories read it
    assert callbacks[-3].dirpath == tmp_path / "run" / "checkpoints"
    # The configured part is the default conf/callbacks tree, not an empty one.
    assert {ModelCheckpoint, LastCheckpoint, ThroughputLogger, LearningRateLogger} <= set(
        configured(cfg)
    )


@pytest.mark.parametrize(
    ("override", "removed"),
    [
        ("callbacks.throughput=null", ThroughputLogger),
        ("~callbacks.throughput", ThroughputLogger),
        ("callbacks.model_checkpoint=null", ModelCheckpoint),
    ],
)
def test_removing_a_configured_callback_removes_exactly_it(
    override: str, removed: type, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    default = types(template_callbacks(compose_config([], run_dir), run_dir, TrainingPlanner()))
    cfg = compose_config([override], run_dir)
    without = types(template_callbacks(cfg, run_dir, TrainingPlanner()))

    assert default.count(removed) == 1
    expected = list(default)
    expected.remove(removed)  # exact type: LastCheckpoint (a ModelCheckpoint) stays
    assert without == expected


def test_a_run_without_logger_leaves_out_only_logger_callbacks(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cfg = compose_config([], run_dir)
    with_logger = types(template_callbacks(cfg, run_dir, TrainingPlanner(), has_logger=True))
    without = types(template_callbacks(cfg, run_dir, TrainingPlanner(), has_logger=False))

    assert with_logger.count(LearningRateLogger) == 1
    assert without == [t for t in with_logger if t is not LearningRateLogger]
