"""Manual optimization with its own accumulation over 2 micro-batches and two optimizers (SGD
for the body, Adam for the head), both stepped once per window, but each micro-batch's mean loss
is backpropagated at full weight: every step applies the sum of 2 micro-batch means.

Invariant: accumulating K micro-batches equals one step on the whole batch, per optimizer
(accumulation.equivalence).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    accumulate = 2
    divide = False

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.manual_backward(loss / self.accumulate if self.divide else loss)
        if (batch_idx + 1) % self.accumulate == 0:
            for opt in self.optimizers():
                opt.step()
                opt.zero_grad()
        self.log("train_loss", loss)
        return loss.detach()

    def configure_optimizers(self) -> Any:
        body = torch.optim.SGD(self.net[1].parameters(), lr=0.1)
        head = torch.optim.Adam(self.net[3].parameters(), lr=1e-2)
        return [body, head]


class Healthy(Buggy):
    """The fix: divide each micro-batch's loss by the window's micro-batches."""

    divide = True
