"""Why a fit ended, for results.json (`stop_reason`) and, when early stopping ended it, one line.

A pre-empted run exits (code 3) before results.json is written, so `preempted` never appears
here: the run that resumes it writes results.json with its own reason.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

from trainwell.io.checkpoint_read import load_checkpoint_file

# Ctrl+C is not among them: Lightning exits the process (code 1) after a KeyboardInterrupt.
STOP_REASONS = ("max_epochs", "max_steps", "early_stopping", "stopped", "fast_dev_run")


def _early_stopping(trainer: L.Trainer) -> EarlyStopping | None:
    """The EarlyStopping callback that ended this fit, if one did."""
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if (
            isinstance(callback, EarlyStopping)
            and callback.stopping_reason != EarlyStoppingReason.NOT_STOPPED
        ):
            return callback
    return None


def stop_reason(trainer: L.Trainer) -> str:
    """One of STOP_REASONS: what ended `trainer.fit`."""
    if trainer.fast_dev_run:
        return "fast_dev_run"
    if _early_stopping(trainer) is not None:
        return "early_stopping"
    max_steps = trainer.max_steps
    if max_steps not in (None, -1) and trainer.global_step >= max_steps:
        return "max_steps"
    max_epochs = trainer.max_epochs
    if max_epochs not in (None, -1) and trainer.current_epoch >= max_epochs:
        return "max_epochs"
    # Another callback set trainer.should_stop (a Timer, a user's own callback).
    return "stopped"


def _best_epoch(trainer: L.Trainer, early: EarlyStopping) -> int | None:
    """The (1-based) epoch whose checkpoint holds early stopping's best value: the best
    checkpoint of a ModelCheckpoint that monitors the same metric. None when there is none."""
    for callback in trainer.checkpoint_callbacks:
        if (
            isinstance(callback, ModelCheckpoint)
            and callback.monitor == early.monitor
            and callback.best_model_path
            and Path(callback.best_model_path).is_file()
        ):
            # The checkpoint records the epoch it was written in (0-based, as Lightning counts).
            return int(load_checkpoint_file(callback.best_model_path)["epoch"]) + 1
    return None


def early_stop_line(trainer: L.Trainer) -> str | None:
    """`early stopping: ...` when EarlyStopping ended the fit, else None. Epochs are counted
    from 1, as the run's `max_epochs` is."""
    early = _early_stopping(trainer)
    if early is None:
        return None
    best = float(early.best_score)
    epoch = _best_epoch(trainer, early)
    where = f" at epoch {epoch}" if epoch is not None else ""
    if early.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED:
        why = f"{early.monitor} did not improve for {early.wait_count} validations"
    else:  # a threshold or a non-finite value: Lightning's own sentence says which
        why = str(early.stopping_reason_message or early.stopping_reason.name).strip()
    return (
        f"early stopping: stopped after epoch {early.stopped_epoch + 1} of "
        f"{trainer.max_epochs} ({why}); best {early.monitor}={best:.4f}{where}"
    )
