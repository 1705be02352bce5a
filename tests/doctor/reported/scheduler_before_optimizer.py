"""scheduler.step() called before optimizer.step() in the training loop: the scheduler moves
on before the first update, so the schedule's first learning rate (a warm-up's start) is never
used and every step runs one value ahead (PyTorch only warns).

Source: https://github.com/ThilinaRajapakse/pytorch-transformers-classification/issues/21 (and https://github.com/zju3dv/NeuralRecon/issues/51)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    scheduler_first = True

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 10))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt, sched = self.optimizers(), self.lr_schedulers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        if self.scheduler_first:
            sched.step()
        opt.step()
        if not self.scheduler_first:
            sched.step()
        self.log("train_loss", loss)
        return loss.detach()


class Healthy(Buggy):
    """The fix: optimizer.step() first, then scheduler.step()."""

    scheduler_first = False
