"""Long-tailed digits (every zero, one in twelve of the other digits) fitted with a plain
cross-entropy: nothing makes up for the imbalance. The fix weighs the loss by class, with the
weights counted in `setup` from the trainer's datamodule, as people write it.

Invariant: training classes are balanced, or something compensates: the loss's own class
weights count (data.class_balance), wherever they come from.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from tests.doctor.reported._common import Classifier, Digits, digits

KEEP_ONE_IN = 12


class Data(Digits):
    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        keep = (y[:cut] == 0) | (torch.arange(cut) % KEEP_ONE_IN == 0)
        self.train = TensorDataset(x[:cut][keep], y[:cut][keep])
        self.val = TensorDataset(x[cut:], y[cut:])


class Buggy(Classifier):
    class_weights: torch.Tensor | None = None

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        weight = None if self.class_weights is None else self.class_weights.to(x.device)
        loss = F.cross_entropy(self(x), y, weight=weight)
        self.log("train_loss", loss)
        return loss


class Healthy(Buggy):
    """The fix: each class weighted by the inverse of its count in the training set."""

    def setup(self, stage: str) -> None:
        labels = self.trainer.datamodule.train.tensors[1]
        counts = torch.bincount(labels, minlength=10).float()
        self.class_weights = counts.sum() / (10 * counts)


class CriterionBuiltInSetup(Healthy):
    """The same weights in an nn.CrossEntropyLoss built in `setup`: its `weight` buffer is in
    the checkpoint, but not in a task built from the config alone (predict, export)."""

    def setup(self, stage: str) -> None:
        super().setup(stage)
        self.criterion = torch.nn.CrossEntropyLoss(weight=self.class_weights)

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        loss = self.criterion(self(x), y)
        self.log("train_loss", loss)
        return loss
