"""A training set streamed from an iterable dataset over the whole data file, while validation
is the file's last 20%: the stream was never told where train ends, so every validation sample
is also a training sample.

Invariant: validation measures what training learns, on samples it did not train on
(data.leakage).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from tests.doctor.reported._common import Digits, digits


class Records(IterableDataset):
    """The records of a file from `start` to `stop`, in a new order every pass."""

    def __init__(self, start: int, stop: int | None) -> None:
        self.start, self.stop = start, stop

    def __iter__(self) -> Iterator[Any]:
        x, y = digits()
        x, y = x[self.start : self.stop], y[self.start : self.stop]
        for i in torch.randperm(len(x)).tolist():
            yield x[i], y[i]


class Buggy(Digits):
    stop_train: bool = False

    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        self.cut = int(0.8 * len(x))
        self.val = TensorDataset(x[self.cut :], y[self.cut :])

    def train_dataloader(self) -> DataLoader:
        stream = Records(0, self.cut if self.stop_train else None)
        return DataLoader(stream, batch_size=self.batch_size)


class Healthy(Buggy):
    """The fix: the stream stops where validation begins."""

    stop_train = True
