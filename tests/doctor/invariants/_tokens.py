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


def lengths_batch(samples: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """(right-padded ids, each sequence's length, its label): what packed-RNN code collates."""
    batch = pad(samples)
    return batch["input_ids"], torch.tensor([len(s) for s in samples]), batch["label"]


def ids_batch(samples: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Right-padded ids and a label, no mask: the model is to tell padding by its id."""
    batch = pad(samples)
    return {"input_ids": batch["input_ids"], "label": batch["label"]}


WIDTH = 12  # longer than any sequence


def fixed_width_batch(samples: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Ids padded to WIDTH whatever the batch, and per-token tags (0 at padding), no mask."""
    batch = pad(samples)
    extra = WIDTH - batch["input_ids"].shape[1]
    widen = lambda t: F.pad(t, (0, extra))  # noqa: E731
    return {"input_ids": widen(batch["input_ids"]), "tags": widen(batch["tags"])}


class Tokens(L.LightningDataModule):
    collate = staticmethod(pad)
    first_id = 1  # the lowest token id a sequence holds (PAD is 0)

    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(3, 12, (480,), generator=g).tolist()
        seqs = [torch.randint(self.first_id, VOCAB, (n,), generator=g) for n in lengths]
        self.train, self.val = seqs[:400], seqs[400:]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train, batch_size=self.batch_size, shuffle=True, collate_fn=self.collate
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size, collate_fn=self.collate)


class Lengths(Tokens):
    """Such sequences as (ids, lengths, label) tuples, id 0 a token too: only the lengths tell
    padding from a real 0."""

    collate = staticmethod(lengths_batch)
    first_id = 0


class PaddedIds(Tokens):
    """The same sequences as {"input_ids", "label"} dicts, padding told only by its id."""

    collate = staticmethod(ids_batch)


class FixedWidth(Tokens):
    """Such sequences padded to WIDTH ids, as models that take one row length need them."""

    collate = staticmethod(fixed_width_batch)


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
