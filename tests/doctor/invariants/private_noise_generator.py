"""Input-noise augmentation drawn from the module's own torch.Generator: its state is in no
checkpoint, so a resumed run replays the noise of the run's first steps.

Invariant: what is saved is what runs (checkpoint.roundtrip: the same next step).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.noise = torch.Generator().manual_seed(0)

    def draw(self, x: torch.Tensor) -> torch.Tensor:
        return torch.randn(x.shape, generator=self.noise).to(x.device)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return super().training_step((x + 0.3 * self.draw(x), y), batch_idx)


class Healthy(Buggy):
    """The fix: draw from the global RNG, which a full checkpoint restores."""

    def draw(self, x: torch.Tensor) -> torch.Tensor:
        return torch.randn_like(x)
