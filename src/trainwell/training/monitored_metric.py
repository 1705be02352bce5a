"""The monitored metric (`monitor.metric`) checked against what the module really logs.

Lightning's EarlyStopping and best-checkpoint ModelCheckpoint find out that the metric they
monitor is never logged only after the first training epoch, and then stop the run with a
traceback. `MonitoredMetricCheck` looks at the first validation (the sanity check, when it runs:
before any training step) and settles it there:

* the run has no validation (no validation_step, no val data, limit_val_batches=0), or the
  module logs no validation metric at all (Lightning's BoringModel): the run trains without a
  best checkpoint and without early stopping, and says so in one line;
* it logs validation metrics, none of them the monitored one (a typo, `val_loss` for
  `val/loss`): a one-line error naming the metric, what the module logs and the fix (exit 2).

The sanity check settles only a missing `val*` metric; any other (a training metric such as
`train/loss`, logged by the steps still to come) is settled at the first validation after
training.

A ReduceLROnPlateau scheduler's `monitor` (its lr_scheduler config in configure_optimizers) is
the module's own choice, not the template's: a `val*` metric it monitors that validation does not
log is refused at the same points (Lightning would stop after the first epoch). A training metric
it monitors, or a scheduler registered with `strict: False`, is left to Lightning.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from trainwell.errors import TrainwellError
from trainwell.io.announce import announce

# Keys ModelCheckpoint adds to the logged metrics itself (a step checkpoint monitors `step`).
_ALWAYS_THERE = frozenset({"epoch", "step"})


class MonitoredMetricCheck(L.Callback):
    """Install before EarlyStopping: it decides before their first check reads the metric."""

    def __init__(self) -> None:
        self._decided = False
        self._before: set[str] = set()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._decided or trainer.enable_validation:
            return
        # No validation at all (no validation_step, no val data, limit_val_batches=0): a
        # monitored `val*` metric never comes; Lightning would warn at every epoch's end.
        watchers = [c for c in _watchers(trainer, set()) if str(c.monitor).startswith("val")]
        self._decided = True
        if watchers:
            _go_without(watchers, f"{type(pl_module).__name__} runs no validation")

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Training metrics logged earlier in the epoch are there already: what validation adds
        # is what the module logs in validation.
        self._before = set(trainer.callback_metrics)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._decided:
            return
        logged = set(trainer.callback_metrics)
        in_validation = sorted(logged - self._before)
        watchers = _watchers(trainer, logged)
        names = sorted({str(c.monitor) for c in watchers})
        unlogged = unlogged_scheduler_monitors(trainer.lr_scheduler_configs, logged)
        if trainer.sanity_checking and not (
            in_validation and any(n.startswith("val") for n in [*names, *unlogged])
        ):
            # Before the first training step only validation has logged: a module may log only
            # after the sanity check, and a training metric (monitor.metric=train/loss) comes
            # with training. Settled at the first validation after training.
            return
        self._decided = True
        module = type(pl_module).__name__
        if unlogged:
            raise TrainwellError(scheduler_monitor_line(module, unlogged, logged))
        if not watchers:
            return
        if in_validation:
            raise TrainwellError(_unlogged_line(module, names, in_validation))
        _go_without(watchers, f"{module} logs no validation metric")


def _unlogged_line(module: str, names: list[str], in_validation: list[str]) -> str:
    return (
        f"{module} logs no {', '.join(names)} in validation, the metric best.ckpt and early"
        f" stopping monitor (monitor.metric); it logs {', '.join(in_validation)}: set"
        " monitor.metric=<one of those> and monitor.mode=min|max, or train without both:"
        " monitor.metric=null callbacks.early_stopping=null"
    )


def refuse_unlogged_monitor(cfg: DictConfig, trainer: L.Trainer, in_validation: set[str]) -> None:
    """What the check above refuses at a run's first validation, for a caller that ran one (the
    doctor): a monitored `val*` metric (monitor.metric) that validation does not log while it logs
    others."""
    monitored = OmegaConf.select(cfg, "monitor.metric")
    if str(monitored).startswith("val") and in_validation and monitored not in in_validation:
        module = type(trainer.lightning_module).__name__
        raise TrainwellError(_unlogged_line(module, [str(monitored)], sorted(in_validation)))


def unlogged_scheduler_monitors(configs: list[Any], logged: set[str]) -> list[str]:
    """The `val*` metrics strict ReduceLROnPlateau schedulers monitor that are not in `logged`
    (the doctor's schedule.interval asks the same)."""
    return sorted(
        {
            str(c.monitor)
            for c in configs
            if c.reduce_on_plateau
            and c.strict
            and str(c.monitor).startswith("val")
            and c.monitor not in logged
        }
    )


def scheduler_monitor_line(module: str, unlogged: list[str], logged: set[str]) -> str:
    """The one line for a scheduler monitoring metrics validation does not log."""
    keys = ", ".join(sorted(logged - _ALWAYS_THERE)) or "nothing"
    return (
        f"{module} logs no {', '.join(unlogged)} in validation, the metric its ReduceLROnPlateau"
        f" monitors (the lr_scheduler config's 'monitor'); it logs {keys}: monitor one of those,"
        " or log that name in validation_step"
    )


def _watchers(trainer: L.Trainer, logged: set[str]) -> list[EarlyStopping | ModelCheckpoint]:
    """The early stopping and checkpoint callbacks whose monitored metric is not in `logged`."""
    return [
        c
        for c in trainer.callbacks
        if isinstance(c, (EarlyStopping, ModelCheckpoint))
        and c.monitor is not None
        and c.monitor not in logged | _ALWAYS_THERE
    ]


def _go_without(watchers: list[EarlyStopping | ModelCheckpoint], why: str) -> None:
    for callback in watchers:
        if isinstance(callback, EarlyStopping):
            callback.strict = False  # a metric that never comes: never stop, never raise
        else:
            callback.save_top_k = 0  # nothing to rank epochs by: no best checkpoint
    names = ", ".join(sorted({str(c.monitor) for c in watchers}))
    announce(
        f"nothing to monitor: {why} ({names} is monitor.metric): no checkpoints/best.ckpt and"
        " no early stopping"
    )
