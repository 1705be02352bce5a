"""Validation losses appended to a list and averaged in on_validation_epoch_end, but the list
is never cleared: each epoch's logged loss is the mean over every validation so far.

Invariant: same weights, same data, same numbers (eval.determinism).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    clears = False

    def __init__(self) -> None:
        super().__init__()
        self.val_losses: list[float] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.val_losses.append(float(F.cross_entropy(self(x), y)))

    def on_validation_epoch_end(self) -> None:
        self.log("val_loss", torch.tensor(self.val_losses).mean())
        if self.clears:
            self.val_losses.clear()


class Healthy(Buggy):
    """The fix: clear the list once its mean is logged."""

    clears = True
