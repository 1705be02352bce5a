"""A weight penalty computed from `p.data`: it is added to the loss (and logged), but autograd
never sees it, so the weights are not pulled towards zero at all.

Invariant: gradients match the loss (grad.flow: finite differences vs autograd).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def weights(self) -> list[torch.Tensor]:
        return [p.data for p in self.parameters()]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss + 0.05 * sum((w**2).sum() for w in self.weights())


class Healthy(Buggy):
    """The fix: penalise the parameters themselves."""

    def weights(self) -> list[torch.Tensor]:
        return list(self.parameters())
