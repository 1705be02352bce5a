"""An iterable dataset whose __iter__ returns a generator built once in __init__: the first
epoch consumes it, and every later epoch yields nothing (Lightning runs them as empty epochs).

Invariant: every epoch is a new order and a full pass, whatever the loader (data.epoch_order).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.doctor.reported._common import Digits


class OnceStream(IterableDataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y
        self.samples = self.generate()

    def generate(self) -> Iterator[Any]:
        for i in torch.randperm(len(self.x)).tolist():
            yield self.x[i], self.y[i]

    def __iter__(self) -> Iterator[Any]:
        return self.samples


class EveryEpochStream(OnceStream):
    def __iter__(self) -> Iterator[Any]:
        return self.generate()


class Buggy(Digits):
    stream: type[OnceStream] = OnceStream

    def train_dataloader(self) -> DataLoader:
        data = self.train.tensors  # type: ignore[union-attr]
        return DataLoader(self.stream(*data), batch_size=self.batch_size)


class Healthy(Buggy):
    """The fix: build the generator inside __iter__, once per epoch."""

    stream = EveryEpochStream
