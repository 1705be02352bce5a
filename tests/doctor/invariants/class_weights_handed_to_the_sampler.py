"""A class-balancing `WeightedRandomSampler` handed one weight per class (1 / class count)
where it wants one weight per sample: it draws indices 0-9 only, the whole epoch long.

Invariant: the training sampler draws what it declares, a pass over the dataset's samples
(data.epoch_order).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, WeightedRandomSampler

from tests.doctor.reported._common import Digits


class Buggy(Digits):
    def weights(self, labels: torch.Tensor) -> torch.Tensor:
        return 1.0 / torch.bincount(labels).float()

    def train_dataloader(self) -> DataLoader:
        labels = self.train.tensors[1]  # type: ignore[union-attr]
        weights = self.weights(labels)
        sampler = WeightedRandomSampler(weights, num_samples=len(labels), replacement=True)
        return DataLoader(self.train, batch_size=self.batch_size, sampler=sampler)  # type: ignore[arg-type]


class Healthy(Buggy):
    """The fix: each sample gets its class's weight."""

    def weights(self, labels: torch.Tensor) -> torch.Tensor:
        return (1.0 / torch.bincount(labels).float())[labels]
