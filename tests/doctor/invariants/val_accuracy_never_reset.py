"""Validation accuracy kept in a torchmetrics object that is updated in validation_step and
computed at the validation epoch end, but never reset: every epoch's value also counts all the
earlier validation passes.

Invariant: a logged metric is what the step outputs give over the split (metrics.recomputation).
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    reset = False

    def __init__(self) -> None:
        super().__init__()
        self.val_acc = MulticlassAccuracy(num_classes=10, average="micro")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.val_acc.update(logits, y)

    def on_validation_epoch_end(self) -> None:
        self.log("val_acc", self.val_acc.compute())
        if self.reset:
            self.val_acc.reset()


class Healthy(Buggy):
    """The fix: reset the metric after computing it (or log the object and let Lightning)."""

    reset = True
