"""A cosine schedule sized in epochs (`T_max=max_epochs`) registered with interval='step': it
runs a whole cosine every few optimizer steps and the learning rate swings up and down all run.

Invariant: the schedule matches the plan (schedule.interval: the pace its length implies).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    interval = "step"

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.trainer.max_epochs)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": cosine, "interval": self.interval}}


class Healthy(Buggy):
    """The fix: an epoch-sized schedule steps per epoch."""

    interval = "epoch"
