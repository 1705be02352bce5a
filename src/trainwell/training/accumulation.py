"""Exact gradient accumulation: every optimizer step follows the mean loss over its whole window.

What Lightning does (automatic optimization, lightning 2.x `ClosureResult.from_training_step_output`):
it divides every micro-batch loss by `accumulate_grad_batches` (K). That is exact only when every
window holds K micro-batches of equal size. It is wrong for

* the short tail window at the end of an epoch (upstream issue #19987): 5 micro-batches with K=4
  give a last window of 1 micro-batch whose gradient Lightning still divides by 4, so that step is
  4x too small;
* uneven micro-batches (a short last batch inside a window): a mean of means over-weights the
  samples of the short batch;
* DDP ranks: DDP averages gradients over ranks, which is a mean of per-rank means.

The fix: the task returns the *sum* of per-sample losses times `loss_scale(...)`. After Lightning's
/K and DDP's mean over W ranks, the gradient is sum(per-sample grads over the global window) / N,
with N the number of samples the whole window holds across all ranks.

Window sizes come from the train loader's arithmetic (its sampler length and batch size), not from an
all_reduce: no collective per micro-batch, and the count is known at the first micro-batch of a
window. Each micro-batch's actual size is checked against the prediction, so a loader the
arithmetic does not describe fails loudly instead of training with a wrong scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn
from torch.utils.data import BatchSampler, DataLoader

from trainwell.errors import TrainwellError


@dataclass(frozen=True)
class EpochBatches:
    """Micro-batch sizes of one training epoch on one rank (ranks hold equal shares)."""

    sizes: tuple[int, ...]
    world_size: int

    def window(self, batch_idx: int, accumulate: int) -> range:
        """Indices of the micro-batches in the optimizer-step window that holds `batch_idx`.

        Lightning steps after every K micro-batches and once more after the epoch's last one, so
        windows are [0, K), [K, 2K), ... with the last one cut short at the epoch end.
        """
        start = (batch_idx // accumulate) * accumulate
        return range(start, min(start + accumulate, len(self.sizes)))

    def window_samples(self, batch_idx: int, accumulate: int) -> int:
        """Samples in this window summed over all ranks."""
        return self.world_size * sum(self.sizes[i] for i in self.window(batch_idx, accumulate))

    def loss_scale(self, batch_idx: int, accumulate: int) -> float:
        """Multiplier for the micro-batch's *summed* loss.

        Lightning divides the returned loss by K and DDP divides the gradient by W, so multiplying
        by K * W / N makes the window's gradient sum(grads) / N: the mean over the window's N samples.
        """
        return accumulate * self.world_size / self.window_samples(batch_idx, accumulate)


def micro_batch_sizes(
    samples: int, batch_size: int, drop_last: bool, num_batches: int | None = None
) -> tuple[int, ...]:
    """Sizes of the batches a DataLoader cuts from `samples` samples, the first `num_batches` of them.

    `num_batches` is what Lightning will actually run (limit_train_batches / overfit_batches cut
    an epoch short).
    """
    if drop_last:
        sizes = [batch_size] * (samples // batch_size)
    else:
        full, rest = divmod(samples, batch_size)
        sizes = [batch_size] * full + ([rest] if rest else [])
    if num_batches is not None:
        sizes = sizes[:num_batches]
    return tuple(sizes)


def epoch_batches(loader: DataLoader, world_size: int, num_batches: int | None) -> EpochBatches:
    """The epoch's micro-batch sizes for the loader Lightning runs (its sampler is per-rank)."""
    batch_sampler = loader.batch_sampler
    if not isinstance(batch_sampler, BatchSampler) or batch_sampler.batch_size is None:
        raise TrainwellError(
            "exact gradient accumulation needs a train DataLoader built with batch_size (a plain "
            f"BatchSampler), got {type(batch_sampler).__name__}; use data.batch_size"
        )
    samples = len(batch_sampler.sampler)
    if num_batches is not None and not math.isfinite(num_batches):
        num_batches = None
    sizes = micro_batch_sizes(
        samples, batch_sampler.batch_size, batch_sampler.drop_last, num_batches
    )
    return EpochBatches(sizes=sizes, world_size=world_size)


def check_micro_batch(batches: EpochBatches, batch_idx: int, actual: int) -> None:
    """The loss scale assumes the predicted size; a different one means the scale is wrong."""
    expected = batches.sizes[batch_idx] if batch_idx < len(batches.sizes) else None
    if expected != actual:
        raise TrainwellError(
            f"train micro-batch {batch_idx} holds {actual} samples but the loader arithmetic "
            f"predicts {expected}, so exact accumulation cannot scale it; use a plain DataLoader "
            "with batch_size (no custom batch sampler or iterable dataset)"
        )


def batchnorm_warning(
    net: nn.Module, micro_batch: int, accumulate: int, world_size: int, sync_batchnorm: bool
) -> str | None:
    """A warning when BatchNorm normalises over fewer samples than the optimizer step averages.

    Accumulation makes the gradient exact, but BN's batch statistics (and its running averages)
    still come from one micro-batch (times the world size with SyncBatchNorm): with K>1 they are
    noisier than the effective batch suggests. `frozen` BN and GroupNorm are unaffected.
    """
    if accumulate <= 1:
        return None
    has_bn = any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training and m.track_running_stats
        for m in net.modules()
    )
    if not has_bn:
        return None
    seen = micro_batch * (world_size if sync_batchnorm else 1)
    effective = micro_batch * accumulate * world_size
    return (
        f"BatchNorm normalises over {seen} samples, not {effective} (micro-batch {micro_batch} x "
        f"accumulate {accumulate} x world {world_size}); consider model.net.norm=group or a "
        "larger micro-batch"
    )
