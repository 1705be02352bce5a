"""BatchNorm built with track_running_stats=False: it keeps no running statistics, so in eval
mode it still normalises each batch with that batch's own mean and variance, and a sample's
prediction depends on the batch it is evaluated in (and on the batch size).

Source: https://github.com/pytorch/pytorch/issues/30294 (and https://github.com/pytorch/pytorch/issues/16793)
"""

from __future__ import annotations

from torch import nn

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    running_stats = False

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64, 32),
            nn.BatchNorm1d(32, track_running_stats=self.running_stats),
            nn.ReLU(),
            nn.Linear(32, 10),
        )


class Healthy(Buggy):
    """The fix: track running statistics (the default), used in eval mode."""

    running_stats = True
