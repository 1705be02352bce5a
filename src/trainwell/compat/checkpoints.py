"""Lightning's checkpoint callbacks and ModelParallelStrategy's checkpoint loading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

# ---------------------------------------------------------------------------------------------
# ModelCheckpoint(save_last=True) writes last.ckpt only when a top-k checkpoint was written at the
# same step (Lightning 2.6.0-2.6.6, model_checkpoint.py on_validation_end / on_train_epoch_end;
# reported downstream in openclimatefix/pvnet#542). With save_top_k=1 last.ckpt is then a copy of
# the *best* epoch, several epochs old. The template's LastCheckpoint (callbacks/) is a second,
# unmonitored ModelCheckpoint that also saves when training ends; it needs ModelCheckpoint's
# private record of the last saved step and its unmonitored save.
# ---------------------------------------------------------------------------------------------


def last_saved_step(checkpoint: ModelCheckpoint) -> int:
    """The global step of `checkpoint`'s most recent save (-1: none yet)."""
    return int(checkpoint._last_global_step_saved)


def save_unmonitored(checkpoint: ModelCheckpoint, trainer: L.Trainer) -> None:
    """Save now, as an unmonitored ModelCheckpoint saves at an epoch's end."""
    checkpoint._save_none_monitor_checkpoint(trainer, checkpoint._monitor_candidates(trainer))


# ---------------------------------------------------------------------------------------------
# A checkpoint written at the end of an epoch's last training batch, before that epoch's
# validation, resumes past the validation: on restart Lightning 2.6 counts an epoch whose last
# batch is done as finished (FitLoop.reset: restarted mid-epoch on the last batch -> processed
# and completed) and never validates it, so val metrics, the best checkpoint and early stopping
# miss an epoch. The template's StepCheckpoint (callbacks/) skips that batch.
# ---------------------------------------------------------------------------------------------


def at_epoch_last_batch(trainer: L.Trainer) -> bool:
    return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)


# ---------------------------------------------------------------------------------------------
# The same holds for a validation inside an epoch (`val_check_interval` < 1, or every N batches):
# a checkpoint written at the end of the batch after which Lightning validates resumes past that
# validation (Lightning 2.6.6, TrainingEpochLoop.advance: restarting at a validation batch fast-
# forwards the validation's progress to its end unless the save happened during validation).
# The resumed run then never logs, scores or checkpoints that validation, and a plateau scheduler
# or early stopping that reads it decides on older values (or fails: "val/loss not available").
# Lightning's own decision, asked at the batch's end, tells which batches those are; the template
# writes no step checkpoint there, its own (StepCheckpoint) or a user's ModelCheckpoint with
# `every_n_train_steps` / `train_time_interval`, and the next checkpoint follows the validation.
# ---------------------------------------------------------------------------------------------


def validation_follows(trainer: L.Trainer) -> bool:
    """At a training batch's end: Lightning will validate before the next batch."""
    fetcher = trainer.fit_loop._data_fetcher
    if fetcher is None or not trainer.training:
        return False
    return bool(trainer.fit_loop.epoch_loop._should_check_val_fx(fetcher))


def saves_per_batch(checkpoint: ModelCheckpoint) -> bool:
    """`checkpoint` writes from on_train_batch_end (a step count or a clock triggers it)."""
    return bool(checkpoint._every_n_train_steps) or checkpoint._train_time_interval is not None


def hold_saves_before_validation(checkpoint: ModelCheckpoint) -> None:
    """Make `checkpoint` skip the batches after which a validation is due (see above)."""
    save = checkpoint.on_train_batch_end

    def on_train_batch_end(trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if not (at_epoch_last_batch(trainer) or validation_follows(trainer)):
            save(trainer, *args, **kwargs)

    checkpoint.on_train_batch_end = on_train_batch_end  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------------
# ModelParallelStrategy (FSDP2) loading a full, non-sharded checkpoint re-keys each optimizer's
# state by looking at its first entry, and raises IndexError when the optimizer keeps no
# per-parameter state at all (plain SGD): `_rekey_optimizer_state_if_needed`, Lightning 2.6.6
# (no upstream report found; related: Lightning-AI/pytorch-lightning#21357). Testing the best
# checkpoint after an FSDP fit, or resuming one, then fails. Such optimizers have only their
# hyper-parameters to restore, which this does itself.
# ---------------------------------------------------------------------------------------------


def load_model_parallel_checkpoint(
    strategy: Any, path: Any, load: Any, weights_only: bool | None
) -> dict[str, Any]:
    """`load(path, weights_only)` is ModelParallelStrategy.load_checkpoint of `strategy`."""
    path = Path(strategy.broadcast(path))
    if not (path.is_file() and strategy.optimizers):
        return load(path, weights_only)
    saved = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
    states = saved.get("optimizer_states", [])
    if not states or any(s.get("state") for s in states):
        return load(path, weights_only)
    optimizers, strategy.optimizers = strategy.optimizers, []
    try:
        checkpoint = load(path, weights_only)
    finally:
        strategy.optimizers = optimizers
    for optimizer, state in zip(optimizers, states, strict=True):
        for group, saved_group in zip(optimizer.param_groups, state["param_groups"], strict=True):
            group.update({k: v for k, v in saved_group.items() if k != "params"})
    return checkpoint
