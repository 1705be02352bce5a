"""The samplers behind the loader policy (loading/sharding.py): the 1-process order as a function of
the seed and the epoch, and each rank's share of it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Sampler


class EpochShuffle(Sampler[int]):
    """A permutation of range(n) that depends only on (seed, epoch): the same on every rank, in
    a resumed run and in the uninterrupted one, whatever else drew from the global RNG."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=generator).tolist())

    def __len__(self) -> int:
        return self.n


class WeightedEpochDraw(Sampler[int]):
    """`num_samples` indices drawn with replacement, index i with probability proportional to
    `weights[i]`: one global draw per epoch that depends only on (seed, epoch).

    It plays the part EpochShuffle plays for a plain shuffle: every rank computes the same draw
    and takes its share of the batches (ShardedBatchSampler), so W ranks train on exactly the
    samples one process draws, which torch's WeightedRandomSampler under a DistributedSampler
    cannot promise (each rank would draw on its own). The draw costs O(num_samples) whatever the
    position a resumed epoch starts at; the batches before it are never loaded.
    """

    replacement = True  # as torch's samplers say it (the training plan reads it)

    def __init__(self, weights: torch.Tensor, num_samples: int | None, seed: int) -> None:
        weights = torch.as_tensor(weights, dtype=torch.float64).reshape(-1)
        if weights.numel() == 0 or not torch.isfinite(weights).all() or (weights < 0).any():
            raise ValueError("sample weights must be finite and non-negative")
        if float(weights.sum()) <= 0:
            raise ValueError("every sample weight is 0: nothing to draw")
        self.weights = weights
        self.num_samples = int(num_samples) if num_samples else weights.numel()
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}")
        self.seed, self.epoch = int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        seed = self.seed + self.epoch
        generator = torch.Generator().manual_seed(seed)
        draw = torch.multinomial(self.weights, self.num_samples, True, generator=generator)
        return iter(draw.tolist())

    def __len__(self) -> int:
        return self.num_samples


class _EpochRelay:
    """Lightning calls `loader.batch_sampler.sampler.set_epoch(e)` every epoch; pass it on to
    the wrapped batch sampler and its sampler, whichever of them keep an epoch."""

    def __init__(self, batches: Any) -> None:
        self._batches = batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        for obj in (self._batches, getattr(self._batches, "sampler", None)):
            set_epoch = getattr(obj, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)


class ShardedBatchSampler(Sampler[list[int]]):
    """Rank `rank` of `world_size` takes every world_size-th batch of `batches`.

    `pad=True` (training): every rank yields ceil(n / world_size) batches; `is_padding(i)` tells
    which of this rank's batches is a zero-weight copy.
    """

    def __init__(self, batches: Iterable[list[int]], world_size: int, rank: int, pad: bool) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in a world of {world_size}")
        self.batches = batches
        self.world_size, self.rank, self.pad = world_size, rank, pad
        self.sampler = _EpochRelay(batches)
        self._padding: set[int] = set()
        self._start = 0

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    @property
    def batch_size(self) -> int | None:
        return getattr(self.batches, "batch_size", None)

    @property
    def drop_last(self) -> bool:
        return bool(getattr(self.batches, "drop_last", False))

    def _mine(self, n: int) -> tuple[list[int], set[int]]:
        """Indices into the global batch list for this rank, and which of them pad."""
        w, r = self.world_size, self.rank
        if not self.pad:
            return list(range(r, n, w)), set()
        rounds = math.ceil(n / w)
        picks, padding = [], set()
        for m in range(rounds):
            i = m * w + r
            if i < n:
                picks.append(i)
            else:
                picks.append(m * w)  # the round's first batch, counted as zero items
                padding.add(m)
        return picks, padding

    def start_at(self, batch: int) -> None:
        """Begin iterations at this rank's batch `batch` until set again (the resumable loader
        sets it before every iter(): the saved position on a mid-epoch resume, else 0). The
        batches before it are never handed to the loader, so their samples are never loaded."""
        self._start = int(batch)

    def __iter__(self) -> Iterator[list[int]]:
        # The start is read now (the loader sets it right before iter()); the order only when
        # the first batch is drawn: Lightning may set the epoch between the two.
        return self._batches(self._start)

    def _batches(self, start: int) -> Iterator[list[int]]:
        every = [list(b) for b in self.batches]
        picks, self._padding = self._mine(len(every))
        for i in picks[start:]:
            yield every[i]

    def __len__(self) -> int:
        if not isinstance(self.batches, Sized):
            raise TypeError("the wrapped batch sampler has no length")
        return len(self._mine(len(self.batches))[0])

    def global_batches(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def is_padding(self, batch_idx: int) -> bool:
        if isinstance(self.batches, Sized):
            return batch_idx in self._mine(len(self.batches))[1]
        return batch_idx in self._padding


class EvenSplitBatchSampler(Sampler[list[int]]):
    """Rank `rank`'s every-W-th share of `sampler`'s order, in as many batches as the largest
    share needs (so equal on all ranks) and none larger than `batch_size`."""

    def __init__(self, sampler: Sampler[int], batch_size: int, world_size: int, rank: int) -> None:
        self.sampler, self.batch_size = sampler, batch_size
        self.world_size, self.rank = world_size, rank

    def _batches(self, n: int) -> int:
        return math.ceil(math.ceil(n / self.world_size) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        order = list(self.sampler)
        share = order[self.rank :: self.world_size]
        k = self._batches(len(order))
        start = 0
        for i in range(k):
            size = len(share) // k + (1 if i < len(share) % k else 0)
            if size:
                yield share[start : start + size]
            start += size

    def __len__(self) -> int:
        return self._batches(len(self.sampler))  # type: ignore[arg-type]
