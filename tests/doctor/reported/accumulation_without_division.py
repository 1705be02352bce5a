"""Gradient accumulation that backpropagates each micro-batch's mean loss without dividing by
the number of accumulation steps: every update is K times too large.

Source: https://github.com/karpathy/nanoGPT/issues/206
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    accumulate = 2
    divide = False

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.manual_backward(loss / self.accumulate if self.divide else loss)
        if (batch_idx + 1) % self.accumulate == 0:
            opt.step()
            opt.zero_grad()
        self.log("train_loss", loss)


class Healthy(Buggy):
    """The fix: divide each micro-batch's loss by the number of accumulation steps."""

    divide = True
