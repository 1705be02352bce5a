"""A per-token tagger whose collate leaves tag 0 at padding and whose loss averages over every
position: padding is trained as a real tag-0 token.

Invariant: inputs that must not matter do not matter (loss.padding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.doctor.invariants._tokens import SequenceClassifier


class Buggy(SequenceClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(16, 3)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.head(self.encode(batch["input_ids"], batch["attention_mask"]))
        per_token = F.cross_entropy(logits.transpose(1, 2), batch["tags"], reduction="none")
        return self.reduce(per_token, batch["attention_mask"].float())

    def reduce(self, per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return per_token.mean()


class Healthy(Buggy):
    """The fix: average over the real positions only."""

    def reduce(self, per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (per_token * mask).sum() / mask.sum()
