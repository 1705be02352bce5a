"""A train DataLoader whose position inside an epoch survives a checkpoint.

Plain Lightning restarts a mid-epoch resume with a *fresh* iterator: the resumed epoch sees the
first batches of a new shuffle again and never the ones that were next. Lightning saves and
restores a loader's position only when the loader itself is stateful (`state_dict` /
`load_state_dict`), which is what this class adds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset


class ResumableDataLoader(DataLoader):
    """A DataLoader over a batch sampler with an `epoch` (loading/sharding.py) that remembers how many
    batches of the current epoch it yielded.

    The batch order is a function of (seed, epoch), and so is the generator that seeds the worker
    processes: it is re-seeded from `seed` and the epoch at every `iter()`, which also passes the
    epoch to a dataset that has `set_epoch`. Resuming mid-epoch starts the batch sampler at the
    saved position (`start_at`): the consumed batches' indices are dropped, their samples are never
    loaded, so a resume at 95% of an epoch starts as fast as one at 5%. That is exact because a
    sample's augmentation is a function of (seed, epoch, sample) (loading/per_sample.py,
    loading/on_device.py), not of a worker's RNG stream. A batch sampler without `start_at` is
    replayed instead (its batches loaded and discarded).
    """

    def __init__(self, *args: Any, seed: int = 0, **kwargs: Any) -> None:
        dataset = kwargs.get("dataset", args[0] if args else None)
        if callable(getattr(dataset, "set_epoch", None)):
            # Workers hold a copy of the dataset made when they start: persistent ones would
            # keep the first epoch's augmentations for every epoch.
            kwargs["persistent_workers"] = False
        super().__init__(*args, **kwargs)
        self.seed = int(seed)
        self._yielded = 0
        self._pending: dict[str, Any] | None = None

    @property
    def epoch(self) -> int:
        return int(getattr(self.batch_sampler, "epoch", 0))

    def __iter__(self) -> Iterator[Any]:
        if self.generator is not None:
            self.generator.manual_seed((self.seed * 100_003 + self.epoch) % 2**63)
        # A dataset whose random augmentation is a function of the epoch (loading/per_sample.py,
        # loading/on_device.py) learns it here, where the epoch is always the one whose batches are
        # about to be drawn.
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(self.epoch)
        # The saved position stays pending until a batch is yielded: Lightning may build an
        # iterator more than once before training starts, and each must start at that position.
        pending = self._pending
        skip = 0
        if pending is not None and pending["epoch"] == self.epoch:
            skip = pending["batches"] if pending["batches"] < len(self) else 0
        start_at = getattr(self.batch_sampler, "start_at", None)
        replay = skip
        if callable(start_at):
            # Before super().__iter__(): worker processes draw their first indices right away.
            start_at(skip)
            replay = 0
        self._yielded = skip - replay
        return self._counting(super().__iter__(), replay)

    def _counting(self, batches: Iterator[Any], replay: int) -> Iterator[Any]:
        for _ in range(replay):
            next(batches)
            self._yielded += 1
        for batch in batches:
            if self._pending is not None:  # a store through DataLoader.__setattr__ per batch
                self._pending = None
            self._yielded += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        # Lightning's training fetcher does not prefetch from a loader with a length, so batches
        # yielded == batches started; checkpoints are written after a batch ends.
        return {"epoch": self.epoch, "batches": self._yielded, "epoch_batches": len(self)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = dict(state_dict)


def restartable_stream(dataset: Any) -> bool:
    """An iterable dataset that can restart any epoch at any sample: it takes `set_epoch(epoch)`
    (its stream is a function of the seed and the epoch) and `start_at(index)` (the next
    iteration begins at the epoch's `index`-th sample, without producing the ones before)."""
    return isinstance(dataset, IterableDataset) and all(
        callable(getattr(dataset, name, None)) for name in ("set_epoch", "start_at")
    )


class _EpochReceiver:
    """The sampler of a ResumableStreamLoader: iterates as the loader's own sampler and passes
    Lightning's per-epoch `set_epoch` (which only reaches samplers) on to the loader."""

    def __init__(self, sampler: Any, loader: ResumableStreamLoader) -> None:
        self.sampler, self.loader = sampler, loader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        self.loader.epoch = int(epoch)


class ResumableStreamLoader(DataLoader):
    """A train DataLoader over a restartable iterable dataset (`restartable_stream`) whose
    mid-epoch resume is exact: each epoch's `iter()` tells the dataset the epoch, and a resumed
    one starts at the first sample the run had not consumed (`resume_at`).

    The position comes from the run's own count of consumed batches (Lightning's batch
    progress), not from the batches this loader yielded: Lightning fetches one batch ahead of an
    iterable loader without a length, so that count runs one past what was trained on.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.epoch = 0
        self._resume_batches: tuple[int, int] | None = None
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def sampler(self) -> Any:
        return self._sampler

    @sampler.setter
    def sampler(self, value: Any) -> None:
        self._sampler = _EpochReceiver(value, self)

    def resume_at(self, epoch: int, batches: int) -> None:
        """The next `iter()` of `epoch` starts after its first `batches` batches."""
        self.epoch = int(epoch)
        self._resume_batches = (int(epoch), int(batches))

    def __iter__(self) -> Iterator[Any]:
        self.dataset.set_epoch(self.epoch)
        skip = 0
        if self._resume_batches is not None and self._resume_batches[0] == self.epoch:
            skip = self._resume_batches[1]
        self.dataset.start_at(skip * int(self.batch_size or 1))
        return self._first_clears_resume(super().__iter__())

    def _first_clears_resume(self, batches: Iterator[Any]) -> Iterator[Any]:
        # Lightning may build an iterator more than once before training starts: each must
        # start at the saved position, until a batch is actually drawn.
        for batch in batches:
            self._resume_batches = None
            yield batch

    def state_dict(self) -> dict[str, Any]:
        # Stateful for Lightning (which otherwise warns the loader is not resumable); the
        # position itself is re-read from the run's batch progress on resume.
        return {"epoch": self.epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch = int(state_dict.get("epoch", self.epoch))
