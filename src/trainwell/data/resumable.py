"""A train DataLoader whose position inside an epoch survives a checkpoint.

Plain Lightning restarts a mid-epoch resume with a *fresh* iterator: the resumed epoch sees the
first batches of a new shuffle again and never the ones that were next. Lightning saves and
restores a loader's position only when the loader itself is stateful (`state_dict` /
`load_state_dict`), which is what this class adds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader


class ResumableDataLoader(DataLoader):
    """A DataLoader that remembers (shuffle generator state at epoch start, samples consumed).

    Resuming restores the generator state the epoch began with, rebuilds the same shuffle and
    *replays* the consumed batches before yielding. Replaying (rather than slicing the index list)
    keeps every per-worker RNG where it was in the uninterrupted run: worker seeds derive from the
    generator and each worker's augmentation stream advances with every sample it loads.
    Requires `generator=` (trainwell always passes a seeded one).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epoch_start_state: torch.Tensor | None = None
        self._yielded = 0
        self._pending: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        # The saved position stays pending until a batch is yielded: Lightning may build an
        # iterator more than once before training starts, and each must start at that position.
        pending = self._pending
        skip = 0
        if pending is not None and self.generator is not None:
            complete = pending["yielded_samples"] >= pending["epoch_samples"]
            # A finished epoch continues from the generator as it was after that epoch's draws
            # (the next epoch's shuffle); an unfinished one rebuilds the same shuffle.
            state = pending["generator_now"] if complete else pending["generator_epoch_start"]
            self.generator.set_state(state)
            if not complete:
                # Counted in samples so a changed micro-batch (allowed only on request) still
                # lands on the nearest batch boundary instead of re-reading or skipping data.
                skip = pending["yielded_samples"] // self.batch_size
        if self.generator is not None:
            self._epoch_start_state = self.generator.get_state()
        self._yielded = 0
        return self._counting(super().__iter__(), skip)

    def _counting(self, batches: Iterator[Any], skip: int) -> Iterator[Any]:
        for _ in range(skip):
            next(batches)
            self._yielded += 1
        for batch in batches:
            self._pending = None
            self._yielded += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        # Lightning's training fetcher does not prefetch from a loader with a length, so batches
        # yielded == batches started; checkpoints are written after a batch ends.
        start = self._epoch_start_state
        if start is None and self.generator is not None:
            start = self.generator.get_state()
        return {
            "batch_size": self.batch_size,
            "yielded_samples": self._yielded * (self.batch_size or 1),
            "epoch_samples": len(self) * (self.batch_size or 1),
            "generator_epoch_start": start,
            "generator_now": self.generator.get_state() if self.generator is not None else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = dict(state_dict)
