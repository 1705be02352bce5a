"""Validation images made from training images moved by one pixel (to "have new images"):
they are not byte-identical to any training image, so an exact comparison finds no overlap,
and validation measures memorisation.

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
        moved = torch.zeros_like(x[: len(x) - cut])
        moved[..., 1:] = x[: len(x) - cut, ..., :-1]  # one pixel to the right
        self.val = TensorDataset(moved, y[: len(x) - cut])


class Healthy(Digits):
    """The fix: validation images that training never saw."""
