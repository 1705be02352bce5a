"""A hand-made warm-up: the loss is scaled by a step counter kept as a plain int attribute. The
checkpoint does not hold it, so a resumed run starts its warm-up again.

Invariant: what is saved is what runs (checkpoint.roundtrip: the same next step).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    warmup = 100

    def __init__(self) -> None:
        super().__init__()
        self.steps_seen = 0

    def steps(self) -> int:
        return self.steps_seen

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.steps_seen += 1
        return loss * min(1.0, self.steps() / self.warmup)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)


class Healthy(Buggy):
    """The fix: count with the trainer's global_step, which the checkpoint restores."""

    def steps(self) -> int:
        return self.global_step + 1
