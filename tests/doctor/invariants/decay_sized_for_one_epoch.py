"""A linear decay to zero in a LambdaLR closure, sized with the optimizer steps of one epoch (a
`steps_per_epoch` taken for the run's total). The learning rate reaches zero at the end of the
first epoch and every later epoch trains at zero (no `total_steps` attribute to read).

Invariant: the schedule matches the plan (schedule.interval: the curve must last the run).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def planned_steps(self) -> int:
        return int(self.trainer.estimated_stepping_batches) // self.trainer.max_epochs

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        total = self.planned_steps()
        decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: max(0.0, 1 - step / total))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": decay, "interval": "step"}}


class Healthy(Buggy):
    """The fix: size it in the run's optimizer steps."""

    def planned_steps(self) -> int:
        return int(self.trainer.estimated_stepping_batches)
