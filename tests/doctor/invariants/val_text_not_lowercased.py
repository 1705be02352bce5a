"""Sentences are lowercased before the vocabulary is built and the training text is encoded;
the validation text is encoded as it comes, so every capitalised word (a sentence's first word,
a name) is out of the vocabulary and becomes the unknown id.

Invariant: every split comes from the distribution it claims (data.split_distribution): token
inputs are compared by how often each id occurs.
"""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

PAD, UNK = 0, 1
WORDS = [
    "the",
    "a",
    "my",
    "our",
    "this",
    "that",
    "cat",
    "dog",
    "horse",
    "bird",
    "sees",
    "likes",
    "finds",
    "follows",
    "quietly",
    "often",
    "near",
    "under",
    "over",
    "with",
    "house",
    "garden",
    "river",
    "field",
    "old",
    "small",
    "red",
    "big",
    "today",
    "again",
]
NAMES = ["Anna", "Paris", "Monday", "Tom", "Berlin"]
ANIMALS = {"cat", "dog", "horse", "bird"}


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS + NAMES) for _ in range(rng.randint(5, 12))]
        out.append(" ".join([words[0].capitalize(), *words[1:]]))
    return out


def collate(rows: list[tuple[list[int], int]]) -> dict[str, torch.Tensor]:
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), PAD)
    for i, (row, _) in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    labels = torch.tensor([label for _, label in rows])
    return {"input_ids": ids, "attention_mask": (ids != PAD).long(), "label": labels}


class Buggy(L.LightningDataModule):
    lower_val = False

    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str | None = None) -> None:
        train, val = sentences(800, seed=0), sentences(200, seed=1)
        words = sorted({w for s in train for w in s.lower().split()})
        self.vocab = {w: i + 2 for i, w in enumerate(words)}

        def encode(text: str) -> tuple[list[int], int]:
            label = int(bool(ANIMALS & set(text.lower().split())))
            return [self.vocab.get(w, UNK) for w in text.split()], label

        self.train = [encode(s.lower()) for s in train]
        self.val = [encode(s.lower() if self.lower_val else s) for s in val]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True, collate_fn=collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=64, collate_fn=collate)


class Healthy(Buggy):
    """The fix: validation text is lowercased like training text."""

    lower_val = True


class Model(L.LightningModule):
    def __init__(self, vocab: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 16, padding_idx=PAD)
        self.head = nn.Linear(16, 2)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pooled = (self.embed(ids) * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return self.head(pooled)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch["input_ids"], batch["attention_mask"]), batch["label"])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        logits = self(batch["input_ids"], batch["attention_mask"])
        self.log("val_loss", F.cross_entropy(logits, batch["label"]))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-2)
