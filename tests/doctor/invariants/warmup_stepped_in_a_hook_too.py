"""A linear warm-up (LambdaLR over 100 optimizer steps) registered with interval='step' and
also stepped in `on_train_batch_end`, the way a hand-written loop steps it: the warm-up ends
after 50 steps instead of 100.

Invariant: the learning rate each optimizer step uses is what the configured schedule alone
gives (schedule.interval).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier

WARMUP = 100


class Buggy(Classifier):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / WARMUP))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.lr_schedulers().step()  # type: ignore[union-attr]


class Healthy(Buggy):
    """The fix: the hook no longer steps what Lightning steps."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        pass
