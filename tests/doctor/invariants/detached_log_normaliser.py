"""Cross-entropy written by hand with the log-normaliser detached "for stability": the loss
value is right, but its gradient lacks the softmax term.

Invariant: gradients match the loss (grad.flow: finite differences vs autograd).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def normaliser(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.logsumexp(dim=1, keepdim=True).detach()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        log_probs = logits - self.normaliser(logits)
        return -log_probs.gather(1, y[:, None]).mean()


class Healthy(Buggy):
    """The fix: keep the normaliser in the graph."""

    def normaliser(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.logsumexp(dim=1, keepdim=True)
