"""A training set streamed from an iterable dataset as dict batches (image, label, name), and a
loss "smoothed" with a running average over the batch's per-sample losses: the last samples of
the batch weigh most, so the same samples in another order give another loss.

Invariant: a sample's loss does not depend on what it is batched with (eval.batch_independence).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset

from tests.doctor.reported._common import Classifier, Digits


class Named(IterableDataset):
    """(image, label) pairs as dicts with a name each, in a new order every pass."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, shuffle: bool) -> None:
        self.x, self.y, self.shuffle = x, y, shuffle

    def __iter__(self) -> Iterator[dict[str, Any]]:
        order = torch.randperm(len(self.x)) if self.shuffle else torch.arange(len(self.x))
        for i in order.tolist():
            yield {"image": self.x[i], "label": self.y[i], "name": f"digit-{i}"}


class Stream(Digits):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(Named(*self.train.tensors, True), batch_size=self.batch_size)  # type: ignore[union-attr]

    def val_dataloader(self) -> DataLoader:
        return DataLoader(Named(*self.val.tensors, False), batch_size=64)


class Buggy(Classifier):
    def reduce(self, per_sample: torch.Tensor) -> torch.Tensor:
        smoothed = per_sample[0]
        for value in per_sample[1:]:
            smoothed = 0.9 * smoothed + 0.1 * value
        return smoothed

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        logits = self(batch["image"])
        loss = self.reduce(F.cross_entropy(logits, batch["label"], reduction="none"))
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val_loss", F.cross_entropy(self(batch["image"]), batch["label"]))


class Healthy(Buggy):
    """The fix: the batch's mean, the same whatever the order (smooth the logged curve, not the
    loss of one batch)."""

    def reduce(self, per_sample: torch.Tensor) -> torch.Tensor:
        return per_sample.mean()
