"""The training set is written as one shard per class (as a class-per-folder export leaves it)
and streamed by an IterableDataset that reads the shards one after another: every batch holds
one class, and every epoch meets the classes in the same order.

Invariant: a training batch looks like the training set (data.batch_composition).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.doctor.reported._common import Digits


class Shards(IterableDataset):
    interleave = False

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.shards = [(x[y == c], y[y == c]) for c in range(10)]

    def _sequential(self) -> Iterator[Any]:
        for xs, ys in self.shards:
            yield from zip(xs, ys, strict=True)

    def _interleaved(self) -> Iterator[Any]:
        """One sample of each shard in turn, from a random position (a shuffle buffer of one)."""
        order = [(s, i) for s, (_, ys) in enumerate(self.shards) for i in range(len(ys))]
        for j in torch.randperm(len(order)).tolist():
            s, i = order[j]
            yield self.shards[s][0][i], self.shards[s][1][i]

    def __iter__(self) -> Iterator[Any]:
        return self._interleaved() if self.interleave else self._sequential()


class Mixed(Shards):
    interleave = True


class Buggy(Digits):
    stream = Shards

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.stream(*self.train.tensors), batch_size=self.batch_size)  # type: ignore[union-attr]


class Healthy(Buggy):
    """The fix: draw from every shard at random positions."""

    stream = Mixed
