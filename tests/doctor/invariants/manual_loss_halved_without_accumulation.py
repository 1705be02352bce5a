"""Manual optimization that steps every micro-batch but still divides its loss by 2, left over
from an accumulation setting that was turned off: nothing is combined, so each step is one
batch's direction at half the size (the learning rate means half of what it says), and the
factor breaks gradients again once windows are combined.

Invariant: accumulating K micro-batches equals one step on the whole batch
(accumulation.equivalence): harmless while K=1, so a warning.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    scale = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        opt.zero_grad()
        self.manual_backward(loss * self.scale)
        opt.step()
        self.log("train_loss", loss)
        return loss.detach()


class Healthy(Buggy):
    """The fix: no accumulation, no division."""

    scale = 1.0
