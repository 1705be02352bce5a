"""OneCycleLR sized with steps_per_epoch=len(loader) but returned without interval='step':
Lightning steps it once per epoch, so training runs on a tiny fraction of the warm-up.

Source: https://github.com/pytorch/pytorch/issues/65417
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    interval: str | None = None

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        steps = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=0.1, total_steps=int(steps), div_factor=5
        )
        if self.interval is None:
            return [opt], [sched]
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.interval}}


class Healthy(Buggy):
    """The fix: {'scheduler': sched, 'interval': 'step'}."""

    interval = "step"
