"""A sigmoid at the end of the model, then BCEWithLogitsLoss: the sigmoid runs twice, every
score lands in [0.5, 0.73] and the loss barely decreases.

Source: https://github.com/avBuffer/UNet3plus_pth/issues/23
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    """Multi-label digits: one sigmoid output per class against one-hot targets."""

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self(x))

    def _loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.binary_cross_entropy_with_logits(self.scores(x), F.one_hot(y, 10).float())

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))


class Healthy(Buggy):
    """The fix: hand the logits to the loss; apply the sigmoid only to read probabilities."""

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)
