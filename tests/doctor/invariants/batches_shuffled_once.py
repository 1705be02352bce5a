"""Samples shuffled once at setup and stored as ready-made batches; the DataLoader
(batch_size=None, no shuffle) then serves the same batches in the same order every epoch.

Invariant: every epoch is a new order and a full pass, whatever the loader (data.epoch_order).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from tests.doctor.reported._common import Digits


class Batches(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor, size: int) -> None:
        order = torch.randperm(len(x))
        self.batches = [(x[i], y[i]) for i in order.split(size)]

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Any:
        return self.batches[i]


class Buggy(Digits):
    shuffle = False

    def train_dataloader(self) -> DataLoader:
        data = self.train.tensors  # type: ignore[union-attr]
        return DataLoader(Batches(*data, self.batch_size), batch_size=None, shuffle=self.shuffle)


class Healthy(Buggy):
    """The fix: let the loader shuffle the batches every epoch."""

    shuffle = True
