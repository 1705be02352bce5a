"""The dataset doubled with mirrored copies of every image, then split at random: most
validation images are the mirror of a training image.

Invariant: no evaluation sample is a near copy of a training sample (data.leakage).
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from tests.doctor.reported._common import Digits, digits


class Buggy(Digits):
    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        x, y = torch.cat([x, x.flip(-1)]), torch.cat([y, y])
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        cut = int(0.8 * len(x))
        self.train = TensorDataset(x[order[:cut]], y[order[:cut]])
        self.val = TensorDataset(x[order[cut:]], y[order[cut:]])


class Healthy(Digits):
    """The fix: split first, then mirror the training images only."""

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        x, y = self.train.tensors  # type: ignore[union-attr]
        self.train = TensorDataset(torch.cat([x, x.flip(-1)]), torch.cat([y, y]))
