"""A running total of the loss kept as a tensor (`total += loss`): every step's graph stays
alive, memory grows until out-of-memory.

Source: https://github.com/pytorch/pytorch/issues/4420
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.total: torch.Tensor | float = 0.0  # over the whole run

    def keep(self, loss: torch.Tensor) -> torch.Tensor | float:
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.total = self.total + self.keep(loss)
        return loss


class Healthy(Buggy):
    """The fix: add `loss.item()` (a number, no graph)."""

    def keep(self, loss: torch.Tensor) -> torch.Tensor | float:
        return loss.item()
