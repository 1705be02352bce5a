"""Shared plumbing for the padding cases: variable-length token sequences in dict batches."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

VOCAB, PAD = 20, 0


def pad(samples: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Right-padded ids, an attention mask (1: real), a sequence label and per-token tags (0 at
    padding, as many collates leave them)."""
    width = max(len(s) for s in samples)
    ids = torch.full((len(samples), width), PAD, dtype=torch.long)
    for row, s in enumerate(samples):
        ids[row, : len(s)] = s
    mask = (ids != PAD).long()
    label = torch.stack([(s == 7).any().long() for s in samples])
    return {"input_ids": ids, "attention_mask": mask, "label": label, "tags": ids % 3 * mask}


class Tokens(L.LightningDataModule):
    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(3, 12, (480,), generator=g).tolist()
        seqs = [torch.randint(1, VOCAB, (n,), generator=g) for n in lengths]
        self.train, self.val = seqs[:400], seqs[400:]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True, collate_fn=pad)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size, collate_fn=pad)


class SequenceClassifier(L.LightningModule):
    """Embeddings, a per-position layer, a masked mean over real positions, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.mix = nn.Linear(16, 16)
        self.head = nn.Linear(16, 2)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.mix(self.embed(ids)))

    def pool(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).float()
        return (h * m).sum(1) / m.sum(1)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.encode(ids, mask), mask))

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(self(batch["input_ids"], batch["attention_mask"]), batch["label"])

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-2)
