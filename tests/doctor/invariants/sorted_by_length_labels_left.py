"""A sequence classifier that sorts its dict batch by length (as packing code does) but leaves
the labels in the original order: each sequence is scored against another one's label, and
which one depends on the order the batch came in.

Invariant: a sample's loss does not depend on what it is batched with (eval.batch_independence).
"""

from __future__ import annotations

import torch

from tests.doctor.invariants._tokens import SequenceClassifier


class Buggy(SequenceClassifier):
    def order(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        order = batch["attention_mask"].sum(1).argsort(descending=True, stable=True)
        return {
            **batch,
            "input_ids": batch["input_ids"][order],
            "attention_mask": batch["attention_mask"][order],
        }

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.loss(self.order(batch))
        self.log("train_loss", loss)
        return loss


class Healthy(Buggy):
    """The fix: the labels travel with their sequences."""

    def order(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        order = batch["attention_mask"].sum(1).argsort(descending=True, stable=True)
        return {k: v[order] for k, v in batch.items()}
