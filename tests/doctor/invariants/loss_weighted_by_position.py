"""A "curriculum" weight that ramps over the batch: each sample's loss is scaled by where it
happens to sit in the batch, so shuffling the same samples changes the loss.

Invariant: a sample's loss does not depend on what it is batched with (eval.batch_independence).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def weights(self, n: int, y: torch.Tensor) -> torch.Tensor:
        return torch.linspace(0.5, 1.5, n)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        per_sample = F.cross_entropy(self(x), y, reduction="none")
        w = self.weights(len(y), y)
        loss = (w * per_sample).mean()
        self.log("train_loss", loss)
        return loss


class Healthy(Buggy):
    """The fix: a weight that belongs to the sample (here its label), not to its position."""

    def weights(self, n: int, y: torch.Tensor) -> torch.Tensor:
        return 0.5 + y.float() / 9
