"""Validation images that are training images saved again at a lower quality (fewer grey
levels, a little noise), as when one photo is kept in two files: no byte is shared.

Invariant: no evaluation sample is a near copy of a training sample (data.leakage).
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from tests.doctor.reported._common import Digits, digits


class Buggy(Digits):
    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        self.train = TensorDataset(x[:cut], y[:cut])
        again = x[cut - (len(x) - cut) : cut]  # the last training images, in another file
        noise = 0.02 * torch.randn(again.shape, generator=torch.Generator().manual_seed(0))
        self.val = TensorDataset(
            ((again * 8).round() / 8 + noise).clamp(0, 1), y[cut - len(again) : cut]
        )


class Healthy(Digits):
    """The fix: each photo in one split only."""
