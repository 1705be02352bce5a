"""An iterable dataset that shuffles its samples with a generator seeded in __iter__ from a
fixed seed: no sampler, no index, and every epoch streams the same order.

Invariant: every epoch is a new order and a full pass, whatever the loader (data.epoch_order).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.doctor.reported._common import Digits


class ShuffledStream(IterableDataset):
    fixed_seed: int | None = 0

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __iter__(self) -> Iterator[Any]:
        generator = None if self.fixed_seed is None else torch.Generator().manual_seed(0)
        for i in torch.randperm(len(self.x), generator=generator).tolist():
            yield self.x[i], self.y[i]


class FreshStream(ShuffledStream):
    fixed_seed = None  # the global RNG: seeded once per run, a new order each epoch


class Buggy(Digits):
    stream: type[ShuffledStream] = ShuffledStream

    def train_dataloader(self) -> DataLoader:
        data = self.train.tensors  # type: ignore[union-attr]
        return DataLoader(self.stream(*data), batch_size=self.batch_size)


class Healthy(Buggy):
    """The fix: draw the order from the run's (seeded) global RNG, new every epoch."""

    stream = FreshStream
