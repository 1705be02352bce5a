"""Validation losses averaged by the module itself in the epoch-end hook and logged with
sync_dist=True: on several ranks Lightning averages the ranks' means unweighted, although the
ranks hold different numbers of samples.

Source: https://github.com/Lightning-AI/pytorch-lightning/issues/9683 (and https://github.com/Lightning-AI/pytorch-lightning/issues/12354)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def on_validation_epoch_start(self) -> None:
        self.val_losses: list[torch.Tensor] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.val_losses.append(F.cross_entropy(self(x), y))

    def on_validation_epoch_end(self) -> None:
        self.log("val_loss", torch.stack(self.val_losses).mean(), sync_dist=True)


class Healthy(Classifier):
    """The fix: log per batch from validation_step; Lightning weighs each batch by its size."""
