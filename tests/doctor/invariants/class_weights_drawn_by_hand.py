"""A hand-written balancing sampler: `torch.multinomial` over the class weights, one draw per
sample of the epoch, yielding what it drew as the sample indices (it drew class ids 0-9).

Invariant: the training sampler draws what it declares, a pass over the dataset's samples
(data.epoch_order).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Sampler

from tests.doctor.reported._common import Digits


class Balanced(Sampler[int]):
    def __init__(self, labels: torch.Tensor) -> None:
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def weights(self) -> torch.Tensor:
        return 1.0 / torch.bincount(self.labels).float()

    def __iter__(self) -> Iterator[int]:
        yield from torch.multinomial(self.weights(), len(self), replacement=True).tolist()


class PerSample(Balanced):
    def weights(self) -> torch.Tensor:
        return (1.0 / torch.bincount(self.labels).float())[self.labels]


class Buggy(Digits):
    sampler = Balanced

    def train_dataloader(self) -> DataLoader:
        labels = self.train.tensors[1]  # type: ignore[union-attr]
        return DataLoader(self.train, batch_size=self.batch_size, sampler=self.sampler(labels))  # type: ignore[arg-type]


class Healthy(Buggy):
    """The fix: one weight per sample, so the draws are sample indices."""

    sampler = PerSample
