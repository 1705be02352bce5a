"""A fixed random projection kept as a plain tensor attribute: state_dict() skips it, so a model
loaded from the checkpoint draws a new projection and the loaded weights meet the wrong wiring.

Source: https://github.com/ligerlac/torchlogix/pull/23
"""

from __future__ import annotations

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.projection = torch.randn(64, 64) / 8.0  # not saved: a plain attribute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = x.flatten(1) @ self.projection.to(x.device)
        return self.net(mixed.view_as(x))


class Healthy(Buggy):
    """The fix: register it as a buffer, so it is saved and restored with the weights."""

    def __init__(self) -> None:
        super().__init__()
        projection = self.projection
        del self.projection
        self.register_buffer("projection", projection)
