"""`on_validation_model_train` overridden without switching back: after the first validation
the model trains in eval mode (dropout off, BatchNorm statistics frozen).

Source: https://github.com/Lightning-AI/pytorch-lightning/issues/20177
"""

from __future__ import annotations

from torch import nn

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10)
        )

    def on_validation_model_eval(self) -> None:
        self.eval()

    def on_validation_model_train(self) -> None:
        pass  # the reporter's override: something custom, but no self.train()


class Healthy(Buggy):
    """The fix: the override ends in train mode."""

    def on_validation_model_train(self) -> None:
        self.train()
