"""A ReduceLROnPlateau whose `monitor` names a metric validation never logs (`val/MAE` where
validation logs `val_loss`): the run would stop after its first epoch, when Lightning first reads
the metric.

Invariant: every metric a scheduler monitors is among the logged keys (schedule.interval: the
same line the run stops with after its sanity check).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    monitor = "val/MAE"

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": self.monitor}}


class Healthy(Buggy):
    """The fix: monitor the name validation logs."""

    monitor = "val_loss"
