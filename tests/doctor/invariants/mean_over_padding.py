"""A sequence classifier that averages its token features with a plain `.mean(1)`: padding
positions are averaged in, so a sequence's prediction depends on how long its batch is.

Invariant: inputs that must not matter do not matter (loss.padding).
"""

from __future__ import annotations

import torch

from tests.doctor.invariants._tokens import SequenceClassifier


class Buggy(SequenceClassifier):
    def pool(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return h.mean(1)


class Healthy(SequenceClassifier):
    """The fix: a mean over the real positions only (the base class's masked mean)."""
