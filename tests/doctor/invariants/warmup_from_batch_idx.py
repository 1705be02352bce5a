"""A hand-made warm-up in `optimizer_step`, counted with the hook's `batch_idx` (the batch within
the epoch) instead of the run's step: the warm-up starts again at the beginning of every epoch.

Invariant: the schedule matches the plan (schedule.interval: no warm-up that restarts).
"""

from __future__ import annotations

from typing import Any

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    warmup = 30

    def step_count(self, batch_idx: int) -> int:
        return batch_idx

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, *args: Any) -> None:
        scale = min(1.0, (self.step_count(batch_idx) + 1) / self.warmup)
        for group in optimizer.param_groups:
            group["lr"] = self.lr * scale
        super().optimizer_step(epoch, batch_idx, optimizer, *args)


class Healthy(Buggy):
    """The fix: count the warm-up with trainer.global_step."""

    def step_count(self, batch_idx: int) -> int:
        return self.global_step
