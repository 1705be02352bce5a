"""A StepLR stepped by hand at the end of training_step (as a plain PyTorch loop does) and also
returned from configure_optimizers with interval='step', so Lightning steps it too: the learning
rate decays twice as fast as configured.

Invariant: the learning rate each optimizer step uses is what the configured schedule alone
gives (schedule.interval).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        decay = torch.optim.lr_scheduler.StepLR(opt, step_size=300, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": decay, "interval": "step"}}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.lr_schedulers().step()  # type: ignore[union-attr]
        return loss


class Healthy(Buggy):
    """The fix: Lightning steps the scheduler; training_step leaves it alone."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return Classifier.training_step(self, batch, batch_idx)
