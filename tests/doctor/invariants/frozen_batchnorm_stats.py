"""A frozen feature block with BatchNorm, left in train mode: its parameters are frozen but its
running statistics follow every training batch, so the "frozen" block drifts.

Invariant: what does not train does not change (optimizer.coverage).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        del self.net  # replaced by a frozen feature block and a head
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32))
        self.features.requires_grad_(False)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.features(x)))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.head.parameters(), lr=self.lr)


class Healthy(Buggy):
    """The fix: the frozen block runs in eval mode while the head trains."""

    def on_train_epoch_start(self) -> None:
        self.features.eval()
