"""Lightning's checkpoint callbacks and ModelParallelStrategy's checkpoint loading."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
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


# ---------------------------------------------------------------------------------------------
# ModelCheckpoint.load_state_dict (Lightning 2.6.6) restores its records (best score, top-k,
# k-th best, last path) only when the checkpoint's `dirpath` is its own; otherwise it warns and
# keeps `best_model_path` alone (by design since Lightning-AI/pytorch-lightning#12045 and #12225).
# A run dir moved or copied whole, or a run resumed into a new run dir, then forgets its best: the
# next validation writes best.ckpt whatever its score, and the test after fit uses it. Here the
# records follow the run: a recorded file found under the new dirpath (the dir was moved) is taken
# there; a monitored checkpoint's file still at its old place (a resume into a new dir) is copied
# in; only when every recorded best file is found is the state handed on, as the new dirpath's.
# ---------------------------------------------------------------------------------------------


def carry_records_to_dirpath(
    callback: ModelCheckpoint,
    state: dict[str, Any],
    copy_files: bool,
    usable: Callable[[str, Any], bool],
) -> dict[str, Any] | None:
    """`state` (a ModelCheckpoint's saved records) rewritten for `callback.dirpath`, or None when
    it needs no rewrite or a monitored checkpoint's files cannot be found. `copy_files`: this
    process copies a monitored checkpoint's files from their old place (global rank zero; the
    others only rename). `usable(path, score)`: whether a found file is the one the records
    name (not one its run wrote later under the same name)."""
    old, new = state.get("dirpath"), callback.dirpath
    if old is None or new is None or Path(old) == Path(new):
        return None
    monitored = callback.monitor not in (None, "step")
    scores = {p: score for p, score in (state.get("best_k_models") or {}).items()}
    scores.setdefault(state.get("best_model_path") or "", state.get("best_model_score"))

    @functools.cache  # one look (and one copy) per recorded file
    def moved(path: str) -> str | None:
        if not path:
            return path
        try:
            relative = Path(path).relative_to(old)
        except ValueError:
            return None  # recorded outside its own dirpath: left to Lightning
        there = Path(new) / relative
        if monitored:
            found = there if there.is_file() else Path(path)
            if not found.is_file() or not usable(str(found), scores.get(path)):
                return None
        if there.exists():
            return str(there)
        if monitored:
            if copy_files:
                there.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, there)
            return str(there)
        return None

    best_k = {moved(p): score for p, score in (state.get("best_k_models") or {}).items()}
    paths = {key: moved(state.get(key) or "") for key in ("best_model_path", "kth_best_model_path")}
    if monitored and (None in best_k or None in paths.values()):
        return None  # its best is lost: Lightning's own handling, and the caller says so
    # An unmonitored checkpoint's records only name the files it replaces next: one not found
    # in the new dir is nothing to replace (Lightning would keep the old path and warn).
    best_k.pop(None, None)
    paths = {key: value or "" for key, value in paths.items()}
    last = moved(state.get("last_model_path") or "")
    return {
        **state,
        **paths,
        "best_k_models": best_k,
        "dirpath": new,
        "last_model_path": last or "",
    }
