"""Self-attention over the token sequence without `key_padding_mask`: every real position
attends to the padding, whatever is there.

Invariant: inputs that must not matter do not matter (loss.padding).
"""

from __future__ import annotations

import torch
from torch import nn

from tests.doctor.invariants._tokens import SequenceClassifier


class Buggy(SequenceClassifier):
    masks_padding = False

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        ignore = ~mask.bool() if self.masks_padding else None
        mixed, _ = self.attention(h, h, h, key_padding_mask=ignore, need_weights=False)
        return torch.relu(self.mix(h + mixed))


class Healthy(Buggy):
    """The fix: pass the padding to attention as key_padding_mask."""

    masks_padding = True
