"""A class-balancing `WeightedRandomSampler` put on every loader by one helper: validation is
drawn with replacement, by class weight, so some samples are scored three times, others never,
a different set each epoch.

Invariant: every evaluated split is scored on each of its samples exactly once (eval.coverage).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

from tests.doctor.reported._common import Digits


def balanced(data: TensorDataset) -> WeightedRandomSampler:
    labels = data.tensors[1]
    weights = 1.0 / torch.bincount(labels).float()
    return WeightedRandomSampler(weights[labels], num_samples=len(labels))


class Buggy(Digits):
    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=64, sampler=balanced(self.val))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, sampler=balanced(self.train))  # type: ignore[arg-type]


class Healthy(Buggy):
    """The fix: the balancing sampler on the train loader only."""

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=64)
