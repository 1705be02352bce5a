"""A model put in eval mode when it was built (after loading weights): Lightning keeps the mode
it finds, so BatchNorm and dropout stay in eval mode for the whole of training.

Source: https://github.com/Lightning-AI/pytorch-lightning/issues/20216
"""

from __future__ import annotations

from torch import nn

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Flatten(),
            nn.Dropout(0.2),
            nn.Linear(8 * 8 * 8, 10),
        )
        self.eval()  # "the pretrained weights are loaded": left in eval mode


class Healthy(Buggy):
    """The fix: return to train mode (or never leave it) before training."""

    def __init__(self) -> None:
        super().__init__()
        self.train()
