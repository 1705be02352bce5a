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
