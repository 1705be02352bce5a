"""A bag-of-embeddings classifier on {"input_ids", "label"} batches that averages the embeddings
of every position, the pad id's included: a sequence's features shrink with the padding its batch
gave it. No mask is in the batch: padding is told by the pad id that fills the rows' ends.

Invariant: inputs that must not matter do not matter (loss.padding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.doctor.invariants._tokens import PAD, SequenceClassifier


class Buggy(SequenceClassifier):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.head(self.pool(self.encode(ids, ids), ids))

    def pool(self, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return h.mean(1)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(self(batch["input_ids"]), batch["label"])


class Healthy(Buggy):
    """The fix: the mask made from the pad id, and a mean over real positions only."""

    def pool(self, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return super(Buggy, self).pool(h, ids != PAD)
