"""Manual optimization that calls optimizer.step() but never optimizer.zero_grad(): every
backward adds to the gradients of all earlier batches, so each update applies the running sum
of every gradient since the start.

Source: https://github.com/wenet-e2e/wekws/pull/73 (and https://github.com/pytorch/pytorch/issues/47175)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def clear(self, opt: Any) -> None:
        """The reporter's loop had no zero_grad call here."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.clear(opt)
        self.manual_backward(loss)
        opt.step()
        self.log("train_loss", loss)
        return loss.detach()


class Healthy(Buggy):
    """The fix: optimizer.zero_grad() before each backward."""

    def clear(self, opt: Any) -> None:
        opt.zero_grad()
