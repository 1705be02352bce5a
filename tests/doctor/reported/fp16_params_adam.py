"""The model is cast with .half() and trained with Adam in float16: no float32 master copy, so
eps=1e-8 and small squared gradients round to 0 and updates below float16's resolution vanish;
the loss goes NaN or stalls.

Source: https://github.com/pytorch/pytorch/issues/8860
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net.half()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.to(next(self.net.parameters()).dtype)).float()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss


class Healthy(Buggy):
    """The fix: keep the weights in float32 (and use precision='16-mixed' for the speed)."""

    def __init__(self) -> None:
        super().__init__()
        self.net.float()
