"""Predictions gathered in one list that training_step and validation_step both append to; the
validation epoch end scores the list and clears it, so val accuracy counts the epoch's training
batches too.

Invariant: a logged metric is what the step outputs give over the split (metrics.recomputation).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        self.outputs.append((logits.argmax(1) == y).detach())
        return F.cross_entropy(logits, y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.outputs.append(logits.argmax(1) == y)

    def on_validation_epoch_end(self) -> None:
        self.log("val_acc", torch.cat(self.outputs).float().mean())
        self.outputs.clear()


class Healthy(Buggy):
    """The fix: training keeps nothing in the list validation scores."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)
