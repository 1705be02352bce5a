"""What `self.log` and torchmetrics hold privately: metric states for checkpoints, the epoch-end
values pending on resume, the logged values the doctor reads, exact synced means."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lightning as L
import torch

# ---------------------------------------------------------------------------------------------
# torchmetrics keeps a metric's update count in a private attribute and caches compute(); neither
# comes back with its states (torchmetrics 1.x: `Metric._update_count`, `Metric._computed`), and
# an aggregation metric registers its states as non-persistent, so MaxMetric (a best-so-far
# score) is not in a checkpoint at all. The template saves every metric's states itself.
# ---------------------------------------------------------------------------------------------


def metric_states(metric: Any) -> dict[str, Any]:
    return {"states": dict(metric.metric_state), "update_count": int(metric.update_count)}


def restore_metric_states(metric: Any, saved: dict[str, Any]) -> None:
    for name, value in saved["states"].items():
        if isinstance(value, torch.Tensor):
            value = value.to(metric.device)
        elif isinstance(value, list):
            value = [v.to(metric.device) if isinstance(v, torch.Tensor) else v for v in value]
        setattr(metric, name, value)
    metric._update_count = int(saved["update_count"])
    metric._computed = None


# ---------------------------------------------------------------------------------------------
# A checkpoint written after an epoch's last training batch but before its end (at the end of
# that epoch's validation, where ModelCheckpoint writes) resumes past that epoch's end: Lightning
# 2.6 counts the epoch as finished on restart (FitLoop.reset) and never runs its
# on_train_epoch_end, where it computes and resets the metrics logged with on_epoch=True. Their
# states would leak into the next epoch, and the epoch's own values would never be logged. The
# template snapshots those values and leaves those states out of such a checkpoint; reading
# which metrics Lightning will reset needs its private result collection.
# ---------------------------------------------------------------------------------------------


def epoch_end_pending(trainer: L.Trainer) -> bool:
    """After the training epoch's last batch, before Lightning's epoch-end logging has run."""
    fit_loop = trainer.fit_loop
    progress = fit_loop.epoch_progress.current
    return bool(
        trainer.training
        and not trainer.sanity_checking
        and fit_loop.epoch_loop.batch_progress.is_last_batch
        and progress.completed < progress.started
    )


def epoch_logged_metrics(trainer: L.Trainer) -> dict[str, Any]:
    """Metric objects logged in training with on_epoch=True, by the name Lightning logs their
    epoch value under (Lightning computes and resets them when the training epoch ends)."""
    found = {}
    for result in trainer.fit_loop.epoch_loop._results.values():
        if not result.is_tensor and result.meta.on_epoch:
            found[result.meta.forked_name(on_step=False)] = result.value
    return found


# ---------------------------------------------------------------------------------------------
# What `self.log` recorded, and how Lightning will reduce it. Lightning keeps each logged value's
# metadata (the hook it was logged from, on_step / on_epoch, reduce_fx, sync_dist) and, for a
# plain tensor with a mean reduction, its running `sum(value x batch_size)` and the batch sizes'
# sum only in private objects: `Trainer._results` (a `_ResultCollection` of `_ResultMetric`s with
# `.meta`, `.is_tensor`, `.value`, `.cumulated_batch_size`; Lightning 2.0-2.6.6). No public API
# exposes them; the doctor reads them to find means that ranks or batches would weigh wrongly
# (an epoch-end mean of per-rank means, a batch_size that is not what the value averages over).
# tests/test_compat.py fails when the structure changes.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoggedValue:
    """One `self.log` key as Lightning holds it in the running loop."""

    name: str
    hook: str  # training_step, on_validation_epoch_end, ...
    on_step: bool
    on_epoch: bool
    reduce: str  # mean | sum | max | min
    sync_dist: bool
    is_metric: bool  # a torchmetrics Metric was logged (it reduces itself across ranks)
    total: float | None  # plain tensors: the running sum (x batch size for a mean)
    batch_sizes: float | None  # plain tensors with a mean: the running sum of batch sizes


def logged_values(trainer: L.Trainer) -> list[LoggedValue]:
    """What the active loop (training, or the validation/test loop running now) has logged."""
    results = trainer._results
    if results is None:
        return []
    out = []
    for metric in results.values():
        meta = metric.meta
        plain = bool(metric.is_tensor)
        mean = bool(meta.is_mean_reduction)
        value = metric.value if plain else None
        out.append(
            LoggedValue(
                name=meta.name,
                hook=meta.fx,
                on_step=bool(meta.on_step),
                on_epoch=bool(meta.on_epoch),
                reduce=getattr(meta.reduce_fx, "__name__", str(meta.reduce_fx)),
                sync_dist=bool(meta.sync.should),
                is_metric=not plain,
                total=float(value) if value is not None and value.numel() == 1 else None,
                batch_sizes=float(metric.cumulated_batch_size) if plain and mean else None,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# `self.log(..., on_epoch=True, sync_dist=True)` of a mean: Lightning syncs the running sum of
# value x batch size and the running sum of batch sizes, the latter as an int64 tensor, with a
# *mean* across ranks. Mean-syncing an integer floors (gloo: the divided result is copied back
# into the integer tensor; NCCL: integer AVG), so whenever the batch sizes' total does not divide
# by the world size every such metric is inflated (Lightning-AI/pytorch-lightning#21859, open;
# 2.6.x; the fix proposed upstream, #21839, syncs the sizes in the value's dtype, as here).
# ---------------------------------------------------------------------------------------------


def exact_logged_means() -> None:
    """Patch Lightning's logged-result reduction once per process (idempotent)."""
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric

    if getattr(_ResultMetric.compute, "_trainwell_exact", False):
        return
    original = _ResultMetric.compute

    def compute(self: Any) -> torch.Tensor:
        if self.is_tensor and self.meta.is_mean_reduction:
            value = self.meta.sync(self.value.clone())
            sizes = self.meta.sync(self.cumulated_batch_size.to(value.dtype))
            return value / sizes
        return original(self)

    compute._trainwell_exact = True  # type: ignore[attr-defined]
    _ResultMetric.compute = compute  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------------
# `self.log(<plain tensor>, on_epoch=True)`: Lightning accumulates the epoch value (for a mean,
# the running sum of value x batch size and the batch sizes' sum; else the running max, min or
# sum) in the training loop's private result collection (`_TrainingEpochLoop._results`, each
# entry a `_ResultMetric` with states `value` and `cumulated_batch_size`), and Lightning 2.6.x
# (2.6.0-2.6.6) leaves that collection out of its checkpoints: `_Loop.state_dict` holds progress
# counters and `on_save_checkpoint` only. A run resumed mid-epoch then reports the mean of the
# epoch's resumed part alone. The template saves each entry's running states with the metadata
# that rebuilds it, and puts it back before the first resumed batch; the module's next
# `self.log` of the key finds it and adds to it, as in the uninterrupted run.
# ---------------------------------------------------------------------------------------------

# `self.log` compares a logged key's metadata with the stored entry's and refuses a mismatch:
# a reduction is rebuilt as the very function Lightning stored (torch's or the builtin).
_REDUCTIONS: dict[str, Any] = {
    "mean": torch.mean,
    "max": torch.max,
    "min": torch.min,
    "sum": torch.sum,
    "builtins.max": max,
    "builtins.min": min,
    "builtins.sum": sum,
}
# Every `_Metadata` field but `reduce_fx` and `_sync` (plain values).
_META_FIELDS = (
    "fx",
    "name",
    "prog_bar",
    "logger",
    "on_step",
    "on_epoch",
    "enable_graph",
    "add_dataloader_idx",
    "dataloader_idx",
    "metric_attribute",
)


def _reduction_name(reduce_fx: Any) -> str | None:
    return next((name for name, fn in _REDUCTIONS.items() if fn is reduce_fx), None)


def epoch_sums(trainer: L.Trainer) -> list[dict[str, Any]]:
    """This rank's running epoch values of the plain tensors logged in training with
    on_epoch=True, each with the metadata that rebuilds its entry (plain data, CPU tensors)."""
    saved = []
    for key, result in trainer.fit_loop.epoch_loop._results.items():
        meta = result.meta
        reduction = _reduction_name(meta.reduce_fx)
        # A process group cannot go into a checkpoint: such an entry restarts with the resume.
        if not result.is_tensor or not meta.on_epoch or result.has_reset or reduction is None:
            continue
        if meta.sync.group is not None:
            continue
        state = metric_states(result)
        state["states"] = {k: v.detach().cpu() for k, v in state["states"].items()}
        saved.append(
            {
                "key": key,
                "meta": {name: getattr(meta, name) for name in _META_FIELDS},
                "reduce_fx": reduction,
                "sync_dist": bool(meta.sync.should),
                "rank_zero_only": bool(meta.sync.rank_zero_only),
                **state,
            }
        )
    return saved


def restore_epoch_sums(trainer: L.Trainer, saved: list[dict[str, Any]]) -> None:
    """Put `epoch_sums` back into the training loop's result collection (before the first
    resumed batch, after Lightning's own resets at fit start)."""
    from lightning.pytorch.trainer.connectors.logger_connector.result import (
        _Metadata,
        _ResultMetric,
        _Sync,
    )

    results = trainer.fit_loop.epoch_loop._results
    for entry in saved:
        meta = _Metadata(**entry["meta"], reduce_fx=_REDUCTIONS[entry["reduce_fx"]])
        # as LightningModule.log builds it: the strategy's reduce, the default group
        meta.sync = _Sync(
            fn=trainer.strategy.reduce,
            _should=entry["sync_dist"],
            rank_zero_only=entry["rank_zero_only"],
        )
        result = _ResultMetric(meta, is_tensor=True)
        restore_metric_states(result, entry)
        results[entry["key"]] = result
    if saved:
        # The first batch of a loop run resets the tensors logged from each hook (Lightning's
        # `should_reset_tensors`, meant for the epoch's first batch); mid-epoch, the
        # uninterrupted run is past that batch.
        trainer._logger_connector._first_loop_iter = False
