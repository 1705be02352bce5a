"""The training set is sorted by label (to take a per-class validation slice off each class's
end) and served by a DataLoader left at its default, shuffle=False: every batch holds one class,
and every epoch walks the classes in the same order.

Invariant: a training batch looks like the training set (data.batch_composition).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.doctor.reported._common import Digits, digits


class Buggy(Digits):
    shuffle = False

    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        order = torch.argsort(y, stable=True)
        x, y = x[order], y[order]
        val = torch.zeros(len(y), dtype=torch.bool)
        for c in range(10):  # the last 20% of each class
            members = torch.nonzero(y == c).flatten()
            val[members[int(0.8 * len(members)) :]] = True
        self.train = TensorDataset(x[~val], y[~val])
        self.val = TensorDataset(x[val], y[val])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=self.shuffle)


class Healthy(Buggy):
    """The fix: shuffle the training loader."""

    shuffle = True
