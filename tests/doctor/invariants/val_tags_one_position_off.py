"""A per-token tagger whose validation collate puts each tag one position to the right (a start
token counted in the tags but not in the ids): every validation tag now belongs to the token
before it. Scored per sample there is nothing to see; scored per token, validation sits at chance.

Invariant: validation measures what training learns (data.split_agreement), on per-position labels.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from tests.doctor.invariants import tags_loss_counts_padding
from tests.doctor.invariants._tokens import Tokens, pad


class Model(tags_loss_counts_padding.Healthy):
    """A tagger that averages over real positions only."""


def shifted(samples: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    batch = pad(samples)
    batch["tags"] = torch.roll(batch["tags"], 1, dims=1) * batch["attention_mask"]
    return batch


class Buggy(Tokens):
    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size, collate_fn=shifted)


class Healthy(Tokens):
    """The fix: one collate for both splits, tags at their tokens."""
