"""Learning-rate schedulers Lightning steps outside what a checkpoint restores."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer import call
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

# ---------------------------------------------------------------------------------------------
# Lightning 2.6 (seen on 2.6.6) steps a ReduceLROnPlateau scheduler with interval "epoch" in
# FitLoop.on_advance_end, after the epoch's validation, where ModelCheckpoint writes. A run
# resumed from such a checkpoint counts that epoch as finished (compat.epoch_end_pending) and
# never steps the scheduler for it: "metrics are not currently saved in the checkpoint". The
# resumed run then keeps a learning rate the uninterrupted run had already cut, and its
# scheduler's patience count lags by one epoch. The template records, in such a checkpoint,
# which plateau schedulers Lightning would step at this epoch's end (decided as Lightning's
# `_update_learning_rates` decides it, at the same moment), and steps them on resume with the
# monitored value restored from the checkpoint, before the next epoch starts.
# ---------------------------------------------------------------------------------------------


def plateau_steps_due(trainer: L.Trainer) -> list[dict[str, Any]]:
    """The plateau schedulers Lightning will step when the current training epoch ends, each as
    its index in `trainer.lr_scheduler_configs` and its step count now (call while
    compat.epoch_end_pending)."""
    if not trainer.lr_scheduler_configs or not trainer.lightning_module.automatic_optimization:
        return []
    due = []
    for index, config in enumerate(trainer.lr_scheduler_configs):
        if not config.reduce_on_plateau or config.interval != "epoch":
            continue
        if (trainer.current_epoch + 1) % config.frequency != 0:
            continue
        due.append({"index": index, "last_epoch": getattr(config.scheduler, "last_epoch", None)})
    return due


def step_plateau_schedulers(
    trainer: L.Trainer, due: list[dict[str, Any]], monitored: dict[str, float]
) -> None:
    """Take the plateau steps `plateau_steps_due` recorded, with the monitored values the run had
    logged by then; a scheduler already stepped past its recorded count (a Lightning that steps
    it on restart itself) is left alone."""
    configs = trainer.lr_scheduler_configs
    for entry in due:
        config = configs[entry["index"]]
        scheduler = config.scheduler
        saved_count = entry["last_epoch"]
        if saved_count is not None and getattr(scheduler, "last_epoch", None) != saved_count:
            continue
        value = monitored.get(config.monitor) if config.monitor is not None else None
        if value is None:
            # As Lightning's own step would have done at that epoch's end.
            if config.strict:
                raise MisconfigurationException(
                    f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not"
                    f" available. Available metrics are: {list(monitored)}."
                    " Condition can be set using `monitor` key in lr scheduler dict"
                )
            rank_zero_warn(
                f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not"
                " available but strict is set to `False`. Skipping learning rate update.",
                category=RuntimeWarning,
            )
            continue
        progress = trainer.fit_loop.epoch_loop.scheduler_progress
        progress.increment_ready()
        # float64: the logged value (saved as a Python float) comes back unrounded.
        monitor = torch.tensor(value, dtype=torch.float64)
        call._call_lightning_module_hook(trainer, "lr_scheduler_step", scheduler, monitor)
        progress.increment_completed()
