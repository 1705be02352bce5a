"""A torchmetrics Accuracy kept in a plain dict, updated in validation_step and logged from
on_validation_epoch_end with compute() but never reset: every validation pass reports the
accuracy of all passes so far.

Invariant: same weights, same data, same numbers (eval.determinism).
"""

from __future__ import annotations

from typing import Any

from torchmetrics.classification import MulticlassAccuracy

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    resets = False

    def __init__(self) -> None:
        super().__init__()
        self.metrics = {"acc": MulticlassAccuracy(num_classes=10)}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.metrics["acc"].update(self(x).argmax(-1).cpu(), y.cpu())

    def on_validation_epoch_end(self) -> None:
        self.log("val_acc", self.metrics["acc"].compute())
        if self.resets:
            self.metrics["acc"].reset()


class Healthy(Buggy):
    """The fix: reset the metric after computing it (or log the metric object itself)."""

    resets = True
