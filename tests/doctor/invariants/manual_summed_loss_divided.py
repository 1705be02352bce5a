"""Manual optimization with its own accumulation over 2 micro-batches, following the recipe
"divide each micro-batch loss by K", but the loss is a sum over samples (reduction='sum'): one
batch's loss is already the sum of its micro-batches', so every step applies half of it.

Invariant: accumulating K micro-batches equals one step on the whole batch
(accumulation.equivalence).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    accumulate = 2
    lr = 1e-3
    divide = True

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y, reduction="sum")
        self.manual_backward(loss / self.accumulate if self.divide else loss)
        if (batch_idx + 1) % self.accumulate == 0:
            opt.step()
            opt.zero_grad()
        self.log("train_loss", loss / len(y))
        return loss.detach()


class Healthy(Buggy):
    """The fix: a summed loss adds up over micro-batches as it is."""

    divide = False
