"""A per-token tagger written for rows of one fixed width (it refuses any other), on dict
batches padded to that width with the pad id and no mask; its loss averages over every position,
so padding is trained as a real tag-0 token. Padding the batch further cannot test it: only the
padded tags can be rewritten.

Invariant: inputs that must not matter do not matter (loss.padding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.doctor.invariants._tokens import PAD, WIDTH, SequenceClassifier


class Buggy(SequenceClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(16, 3)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"]
        if ids.shape[1] != WIDTH:
            raise ValueError(f"rows of {WIDTH} ids expected, got {ids.shape[1]}")
        per_token = F.cross_entropy(
            self.head(self.encode(ids, ids)).transpose(1, 2), batch["tags"], reduction="none"
        )
        return self.reduce(per_token, (ids != PAD).float())

    def reduce(self, per_token: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        return per_token.mean()


class Healthy(Buggy):
    """The fix: average over the real positions only."""

    def reduce(self, per_token: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        return (per_token * real).sum() / real.sum()
