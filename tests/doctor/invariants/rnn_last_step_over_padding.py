"""A GRU sequence classifier on (ids, lengths, label) tuples that reads the GRU's output at the
last position of the padded batch: for every sequence shorter than its batch's longest, that is
the state after running over the padding, so its prediction depends on how much padding the
batch gave it. No mask is in the batch: the lengths say where padding starts.

Invariant: inputs that must not matter do not matter (loss.padding).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from tests.doctor.invariants._tokens import VOCAB


class Buggy(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.gru = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, 2)

    def last(self, out: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return out[:, -1]

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.embed(ids))
        return self.head(self.last(out, lengths))

    def loss(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        ids, lengths, label = batch
        return F.cross_entropy(self(ids, lengths), label)

    def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class Healthy(Buggy):
    """The fix: each sequence's output at its own last real position."""

    def last(self, out: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return out[torch.arange(len(out)), lengths - 1]
