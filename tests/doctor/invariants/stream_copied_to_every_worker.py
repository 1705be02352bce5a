"""An iterable dataset read by two DataLoader workers: each worker runs its own copy of
`__iter__`, and the stream does not shard itself, so every sample arrives twice per epoch.

Invariant: the workers of a loader each yield their own share (data.worker_seeding).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from tests.doctor.reported._common import Digits


class Stream(IterableDataset):
    shard = False

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __iter__(self) -> Iterator[Any]:
        mine = torch.arange(len(self.x))
        info = get_worker_info()
        if self.shard and info is not None:
            mine = mine[info.id :: info.num_workers]
        # Lightning seeds each worker's torch RNG: a new order per worker and per epoch.
        for i in mine[torch.randperm(len(mine))].tolist():
            yield self.x[i], self.y[i]


class Sharded(Stream):
    shard = True


class Buggy(Digits):
    stream: type[Stream] = Stream

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.stream(*self.train.tensors),  # type: ignore[union-attr]
            batch_size=self.batch_size,
            num_workers=2,
        )


class Healthy(Buggy):
    """The fix: each worker streams every num_workers-th sample (get_worker_info())."""

    stream = Sharded
