"""Each rank's share of a loader: the 1-process batches, dealt out without padding or dropping.

Lightning's default under DDP is a `DistributedSampler`, which pads every split to a multiple of
the world size by repeating samples: a 101-sample test split is evaluated as 102 on 2 ranks, and
training sees duplicates a 1-process run does not. Here instead:

* the loader's own batches are computed on every rank, in the order a single process would see
  them (a shuffle is a function of the seed and the epoch only);
* evaluation loaders give rank r every W-th sample (ranks hold one sample more or fewer), cut into
  the same number of batches on every rank, none larger than the loader's batch size: metrics
  sum, then divide, and under FSDP, where every forward gathers parameters from all ranks, no rank
  waits for a forward another rank never runs;
* the train loader deals out whole batches, rank r of W taking batches r, r+W, r+2W, ..., and gives every rank the same number of micro-batches, because every rank must
  join the same gradient all-reduces. A rank with no batch left in the epoch's last round gets a
  *padding* batch (a copy of a real one) whose items count zero (callbacks/accumulation.py), so it
  joins the collectives without contributing to the gradient.

So W ranks x K accumulation steps on batches of B see, window for window, the same samples as one
process accumulating K x W batches of B (or K batches of W x B). BatchNorm layers do see a padding
batch in their running statistics; nothing else does.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Iterator, Sized
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
)

from trainwell.data.resumable import ResumableDataLoader


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

    def __iter__(self) -> Iterator[list[int]]:
        every = [list(b) for b in self.batches]
        picks, self._padding = self._mine(len(every))
        for i in picks:
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


def _loader_kwargs(loader: DataLoader) -> dict[str, Any]:
    """Everything that shapes what a loader yields, except how indices are batched."""
    kwargs: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    return kwargs


def _global_order(sampler: Sampler, dataset: Any, seed: int) -> Sampler:
    """The 1-process order as a function of (seed, epoch): a plain shuffle becomes EpochShuffle."""
    if (
        isinstance(sampler, RandomSampler)
        and not sampler.replacement
        and sampler.num_samples == len(dataset)
    ):
        generator = sampler.generator
        return EpochShuffle(len(dataset), generator.initial_seed() if generator else seed)
    return sampler


class LoaderPolicyWarning(UserWarning):
    """A loader trainwell cannot shard exactly or make resumable; what it means is in the text."""


def shard_loader(loader: Any, world_size: int, rank: int, train: bool, seed: int) -> Any:
    """The loader rank `rank` should iterate (containers of loaders are handled element-wise).

    Train loaders are always rebuilt (also on one process) as a ResumableDataLoader: a mid-epoch
    resume continues with the batches that were next.
    """
    if isinstance(loader, (list, tuple)):
        return type(loader)(shard_loader(x, world_size, rank, train, seed) for x in loader)
    if isinstance(loader, dict):
        return {k: shard_loader(v, world_size, rank, train, seed) for k, v in loader.items()}
    problem = _unshardable(loader)
    if problem:
        if train or world_size > 1:
            warnings.warn(
                f"{problem}: trainwell leaves this {'train' if train else 'evaluation'} loader as "
                "it is, so "
                + (
                    "each rank must yield its own, equally long share of the data and "
                    if world_size > 1
                    else ""
                )
                + "a mid-epoch resume restarts its epoch",
                LoaderPolicyWarning,
                stacklevel=2,
            )
        return loader
    if not train and world_size == 1:
        return loader
    base = loader.batch_sampler
    batches: Sampler[list[int]]
    if type(base) is BatchSampler and not train:
        batches = EvenSplitBatchSampler(base.sampler, base.batch_size, world_size, rank)
    else:
        if type(base) is BatchSampler:
            base = BatchSampler(
                _global_order(base.sampler, loader.dataset, seed), base.batch_size, base.drop_last
            )
        batches = ShardedBatchSampler(base, world_size, rank, pad=train)
    generator_seed = loader.generator.initial_seed() if loader.generator is not None else seed
    if train:
        return ResumableDataLoader(
            loader.dataset,
            batch_sampler=batches,
            generator=torch.Generator(),
            seed=generator_seed,
            **_loader_kwargs(loader),
        )
    return DataLoader(
        loader.dataset,
        batch_sampler=batches,
        generator=torch.Generator().manual_seed(generator_seed),
        **_loader_kwargs(loader),
    )


def _unshardable(loader: Any) -> str:
    if not isinstance(loader, DataLoader):
        return f"a {type(loader).__name__} is not a torch DataLoader"
    if type(loader) not in (DataLoader, ResumableDataLoader):
        return f"{type(loader).__name__} is a DataLoader subclass trainwell cannot rebuild"
    if isinstance(loader.dataset, IterableDataset):
        return f"{type(loader.dataset).__name__} is an iterable dataset (no index to shard by)"
    if loader.batch_sampler is None:
        return "the DataLoader has batch_size=None (no batches to deal out)"
    if isinstance(loader.batch_sampler, ShardedBatchSampler):
        return "the loader is already sharded"
    if isinstance(getattr(loader.batch_sampler, "sampler", None), DistributedSampler):
        return "the loader already uses a DistributedSampler"
    return ""


def install_loader_policy(datamodule: Any, seed: int) -> None:
    """Route the datamodule's loaders through `shard_loader` for the Trainer it is attached to.

    Wraps only the hooks the datamodule defines (Lightning treats a defined hook as a split that
    exists). Idempotent.
    """
    from lightning.pytorch.utilities.model_helpers import is_overridden

    if getattr(datamodule, "_trainwell_loader_policy", False):
        return
    for name, train in (
        ("train_dataloader", True),
        ("val_dataloader", False),
        ("test_dataloader", False),
        ("predict_dataloader", False),
    ):
        if not is_overridden(name, datamodule):
            continue
        original = getattr(datamodule, name)

        def hook(original: Any = original, train: bool = train) -> Any:
            if getattr(datamodule, "_trainwell_in_hook", False):
                # test_dataloader returning self.val_dataloader(): shard once, in the outer hook
                return original()
            datamodule._trainwell_in_hook = True
            try:
                loader = original()
            finally:
                datamodule._trainwell_in_hook = False
            trainer = getattr(datamodule, "trainer", None)
            world, rank = (trainer.world_size, trainer.global_rank) if trainer else (1, 0)
            return shard_loader(loader, world, rank, train, seed)

        setattr(datamodule, name, hook)
    datamodule._trainwell_loader_policy = True
