"""Legitimate code the batch-independence check must not fail: mixup pairs each sample with
another one drawn by a random permutation, so the same samples in another order are paired
differently and the loss moves, by design.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Healthy(Classifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        partner = torch.randperm(len(y))
        lam = 0.7
        logits = self(lam * x + (1 - lam) * x[partner])
        loss = lam * F.cross_entropy(logits, y) + (1 - lam) * F.cross_entropy(logits, y[partner])
        self.log("train_loss", loss)
        return loss
