"""The validation labels are shuffled (to "mix the classes") but their inputs are not: every
validation label now belongs to another image, and validation accuracy measures nothing.

Invariant: validation measures what training learns (data.split_agreement).
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from tests.doctor.reported._common import Digits, digits


class Buggy(Digits):
    def mix(self, x: torch.Tensor, y: torch.Tensor) -> TensorDataset:
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        return TensorDataset(x, y[order])

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        x, y = digits()
        cut = int(0.8 * len(x))
        self.val = self.mix(x[cut:], y[cut:])


class Healthy(Buggy):
    """The fix: shuffle inputs and labels with one permutation."""

    def mix(self, x: torch.Tensor, y: torch.Tensor) -> TensorDataset:
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        return TensorDataset(x[order], y[order])
