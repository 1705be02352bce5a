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
#
# The same holds for a plateau scheduler with interval "step": Lightning steps it in
# TrainingEpochLoop.on_advance_end, after on_train_batch_end where a step checkpoint is written;
# a resume from there counts the batch as done and never steps the scheduler for it. Those steps
# are recorded and taken the same way.
# ---------------------------------------------------------------------------------------------


def plateau_steps_due(trainer: L.Trainer, epoch_end_pending: bool) -> list[dict[str, Any]]:
    """The plateau steps Lightning still owes at this point of training and a resume from here
    would skip, in the order Lightning takes them: the current batch's per-step ones (when called
    inside on_train_batch_end), then the epoch's (when `epoch_end_pending`). Each as its index in
    `trainer.lr_scheduler_configs` and its step count now."""
    if not trainer.lr_scheduler_configs or not trainer.lightning_module.automatic_optimization:
        return []
    epoch_loop = trainer.fit_loop.epoch_loop
    batch = epoch_loop.batch_progress.current
    # Processed but not completed: on_train_batch_end, before the batch's per-step plateau step
    # (no step inside an accumulation window, as Lightning's update_lr_schedulers decides).
    batch_end = trainer.training and batch.processed > batch.completed
    step_due = batch_end and not epoch_loop._should_accumulate()
    due = []
    for interval, pending, count in (
        ("step", step_due, epoch_loop.batch_idx),
        ("epoch", epoch_end_pending, trainer.current_epoch),
    ):
        if not pending:
            continue
        for index, config in enumerate(trainer.lr_scheduler_configs):
            if not config.reduce_on_plateau or config.interval != interval:
                continue
            if (count + 1) % config.frequency != 0:
                continue
            last_epoch = getattr(config.scheduler, "last_epoch", None)
            due.append({"index": index, "last_epoch": last_epoch})
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


# ---------------------------------------------------------------------------------------------
# Lightning 2.6 (seen on 2.6.6) skips the epoch-end plateau step of the whole first epoch of a
# resumed run: FitLoop.on_advance_end steps plateau schedulers only `if not self.restarting`, and
# the fit loop's restarting flag, set when the checkpoint's loop state is loaded, stays set until
# that first epoch ends. Meant for a checkpoint written at the epoch's end (the epoch's monitored
# metrics are gone), it also hits a resume from a mid-epoch step checkpoint, whose epoch logs its
# metrics afresh: the resumed run keeps a rate the uninterrupted run cut at that epoch's end. Once
# a resumed run trains its first batch, the fit loop's restart is over (its restart stage and the
# loader state are applied by then): the template clears that flag there, on the fit loop alone,
# so Lightning takes the epoch's plateau step itself, at the same moment, with the same metrics.
# ---------------------------------------------------------------------------------------------


def end_fit_restart(trainer: L.Trainer) -> None:
    """The resumed run trains again: let Lightning step epoch-interval plateau schedulers at this
    epoch's end (call at its first training batch)."""
    # The fit loop's flag alone, not the `restarting` setter (which cascades to the epoch and
    # validation loops): their restart handling is their own, and they clear it themselves.
    trainer.fit_loop._restarting = False
