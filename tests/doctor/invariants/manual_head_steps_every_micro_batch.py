"""Manual optimization with two optimizers (SGD for the body, Adam for the head) and its own
accumulation over 2 micro-batches: each micro-batch's loss is divided by 2, the body steps once
per window, but the head is stepped (and zeroed) every micro-batch, so each of its steps applies
half of one micro-batch's gradient.

Invariant: accumulating K micro-batches equals one step on the whole batch, per optimizer
(accumulation.equivalence).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    accumulate = 2
    head_every = 1  # micro-batches per head step

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        body, head = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.manual_backward(loss / self.accumulate)
        for opt, every in ((body, self.accumulate), (head, self.head_every)):
            if (batch_idx + 1) % every == 0:
                opt.step()
                opt.zero_grad()
        self.log("train_loss", loss)
        return loss.detach()

    def configure_optimizers(self) -> Any:
        body = torch.optim.SGD(self.net[1].parameters(), lr=0.1)
        head = torch.optim.Adam(self.net[3].parameters(), lr=1e-2)
        return [body, head]


class Healthy(Buggy):
    """The fix: the head steps once per window too."""

    head_every = 2
