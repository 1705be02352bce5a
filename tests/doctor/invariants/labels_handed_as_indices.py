"""A `SubsetRandomSampler` meant to restrict training to the labelled samples, handed the labels
themselves (`labels.tolist()`) where it wants sample indices: an epoch draws samples 0-9 over
and over.

Invariant: the training sampler draws what it declares, a pass over the dataset's samples
(data.epoch_order).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, SubsetRandomSampler

from tests.doctor.reported._common import Digits


class Buggy(Digits):
    def chosen(self, labels: torch.Tensor) -> list[int]:
        return labels[labels >= 0].tolist()

    def train_dataloader(self) -> DataLoader:
        labels = self.train.tensors[1]  # type: ignore[union-attr]
        sampler = SubsetRandomSampler(self.chosen(labels))
        return DataLoader(self.train, batch_size=self.batch_size, sampler=sampler)  # type: ignore[arg-type]


class Healthy(Buggy):
    """The fix: the positions of the labelled samples."""

    def chosen(self, labels: torch.Tensor) -> list[int]:
        return torch.nonzero(labels >= 0).flatten().tolist()
