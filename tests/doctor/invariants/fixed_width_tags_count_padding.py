"""The per-token tagger of `tags_loss_counts_padding`, written for rows of one fixed width (it
refuses any other), on dict batches padded to that width with the pad id and no mask: padding
the batch further cannot test it, only its padded tags can be rewritten.

Invariant: inputs that must not matter do not matter (loss.padding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.doctor.invariants import tags_loss_counts_padding as tags
from tests.doctor.invariants._tokens import PAD, WIDTH


class Buggy(tags.Buggy):
    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"]
        if ids.shape[1] != WIDTH:
            raise ValueError(f"rows of {WIDTH} ids expected, got {ids.shape[1]}")
        logits = self.head(self.encode(ids, ids))
        per_token = F.cross_entropy(logits.transpose(1, 2), batch["tags"], reduction="none")
        return self.reduce(per_token, (ids != PAD).float())


class Healthy(Buggy):
    """The fix: average over the real positions only."""

    reduce = tags.Healthy.reduce
