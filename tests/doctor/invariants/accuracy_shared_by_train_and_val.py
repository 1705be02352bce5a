"""One torchmetrics Accuracy object for training and validation: at the epoch's validation it
still holds the epoch's training updates, so the logged val accuracy mixes both splits (and
train accuracy, computed after validation reset it, logs 0 with torchmetrics' "compute before
update" warning).

Invariant: a logged metric is what the step outputs give over the split (metrics.recomputation).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.train_acc = MulticlassAccuracy(num_classes=10, average="micro")
        self.val_acc = self.train_acc

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train_acc", self.train_acc, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.val_acc(logits, y)
        self.log("val_acc", self.val_acc)


class Healthy(Buggy):
    """The fix: one metric object per stage."""

    def __init__(self) -> None:
        super().__init__()
        self.val_acc = MulticlassAccuracy(num_classes=10, average="micro")
