"""Inputs standardised with the batch's own mean and std inside training_step (validation uses
the model as is): a sample's loss depends on which samples share its batch.

Invariant: a sample's loss does not depend on what it is batched with (eval.batch_independence).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def standardise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(0)) / (x.std(0) + 1e-3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(self.standardise(x)), y)
        self.log("train_loss", loss)
        return loss


class Healthy(Buggy):
    """The fix: each sample standardised with its own statistics."""

    def standardise(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.flatten(1)
        mean, std = flat.mean(1), flat.std(1)
        shape = (-1,) + (1,) * (x.dim() - 1)
        return (x - mean.view(shape)) / (std.view(shape) + 1e-3)
