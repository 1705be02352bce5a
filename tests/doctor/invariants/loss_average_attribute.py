"""The loss is normalised by a running average of itself kept as a plain tensor attribute: it
never reaches the checkpoint, so a resumed run normalises by a fresh average.

Invariant: what is saved is what runs (checkpoint.roundtrip: the same next step).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.keep_average(torch.ones(()))

    def keep_average(self, value: torch.Tensor) -> None:
        self.loss_average = value

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.loss_average.mul_(0.9).add_(0.1 * loss.detach())
        return loss / self.loss_average

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Healthy(Buggy):
    """The fix: a registered buffer, saved and restored with the weights."""

    def keep_average(self, value: torch.Tensor) -> None:
        self.register_buffer("loss_average", value)
