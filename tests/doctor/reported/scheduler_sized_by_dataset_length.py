"""OneCycleLR sized with steps_per_epoch=len(train_dataset) instead of len(train_loader): the
schedule is batch_size times longer than the run, which ends early in the warm-up and never
anneals.

Source: https://github.com/Lightning-AI/pytorch-lightning/issues/2643
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tests.doctor.reported._common import Classifier, Digits, digits

EPOCHS = 20  # the run's trainer.max_epochs (the shipped digits experiment), as an hparam


def train_samples() -> int:
    return int(0.8 * len(digits()[1]))  # Digits' training split


class Buggy(Classifier):
    def steps_per_epoch(self) -> int:
        return train_samples()  # len(self.train_dataset): samples, not batches

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt,
            max_lr=0.1,
            div_factor=5,
            epochs=EPOCHS,
            steps_per_epoch=self.steps_per_epoch(),
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Healthy(Buggy):
    """The fix: steps_per_epoch=len(train_loader), the batches of an epoch."""

    def steps_per_epoch(self) -> int:
        return math.ceil(train_samples() / Digits().batch_size)
