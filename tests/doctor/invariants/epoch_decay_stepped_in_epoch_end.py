"""An exponential decay registered per epoch and stepped again in `on_train_epoch_end`: the
learning rate falls by gamma twice each epoch.

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
        decay = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": decay, "interval": "epoch"}}

    def on_train_epoch_end(self) -> None:
        self.lr_schedulers().step()  # type: ignore[union-attr]


class Healthy(Buggy):
    """The fix: Lightning's per-epoch step is the only one."""

    def on_train_epoch_end(self) -> None:
        pass
