"""A training set streamed from a long-tailed source (every zero, but one in twelve of the other
digits), with nothing in the loss or the sampling to make up for it: a model can score well by
predicting zeros.

Invariant: training classes are balanced, or something compensates (data.class_balance).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.doctor.reported._common import Digits

KEEP_ONE_IN = 12


class LongTail(IterableDataset):
    """Every 0, one in KEEP_ONE_IN of the other classes; `repeat` yields each rare sample that
    many times (oversampling the tail back to the head's size)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, repeat: int) -> None:
        keep = (y == 0) | (torch.arange(len(y)) % KEEP_ONE_IN == 0)
        self.x, self.y, self.repeat = x[keep], y[keep], repeat

    def __iter__(self) -> Iterator[Any]:
        order = [i for i in range(len(self.y)) for _ in range(1 if self.y[i] == 0 else self.repeat)]
        for j in torch.randperm(len(order)).tolist():
            yield self.x[order[j]], self.y[order[j]]


class Buggy(Digits):
    repeat = 1

    def train_dataloader(self) -> DataLoader:
        return DataLoader(LongTail(*self.train.tensors, self.repeat), batch_size=self.batch_size)  # type: ignore[union-attr]


class Healthy(Buggy):
    """The fix: the stream oversamples the rare classes."""

    repeat = KEEP_ONE_IN
