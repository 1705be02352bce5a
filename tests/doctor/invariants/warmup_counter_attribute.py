"""A hand-made learning-rate warm-up counted in a plain int attribute. The checkpoint does not
hold it, so a resumed run starts its warm-up again from a tenth of the learning rate.

Invariant: what is saved is what runs (checkpoint.roundtrip: the same next step).
"""

from __future__ import annotations

from typing import Any

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    warmup = 10

    def __init__(self) -> None:
        super().__init__()
        self.steps_seen = 0

    def steps(self) -> int:
        return self.steps_seen

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        scale = min(1.0, (self.steps() + 1) / self.warmup)
        for group in self.optimizers().param_groups:
            group["lr"] = self.lr * scale
        self.steps_seen += 1


class Healthy(Buggy):
    """The fix: count with the trainer's global_step, which the checkpoint restores."""

    def steps(self) -> int:
        return self.global_step
