"""A regression head's (N, 1) output against (N,) targets: MSELoss broadcasts them to (N, N) and
averages every prediction against every target (PyTorch only emits a UserWarning), so the model
learns the batch mean.

Source: https://github.com/deepset-ai/FARM/issues/229 (and https://github.com/pytorch/pytorch/issues/4938)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.doctor.reported._common import Classifier


def brightness(x: torch.Tensor) -> torch.Tensor:
    """The regression target: each image's mean intensity, one float per sample."""
    return x.mean(dim=(1, 2, 3))


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)  # (N, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        loss = F.mse_loss(self.predict(x), brightness(x))
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, _ = batch
        self.log("val_loss", F.mse_loss(self.predict(x), brightness(x)))


class Healthy(Buggy):
    """The fix: squeeze the head's output to the targets' shape."""

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self(x).squeeze(1)
