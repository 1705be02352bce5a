"""Cutout (a random 3x3 patch blanked) written into the one dataset class every split uses,
with no way to turn it off: validation images lose a random patch on each read.

Invariant: evaluation is a function of the weights; a validation item read twice is the same
tensor (eval.determinism).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

from tests.doctor.reported._common import Digits, digits


class Patches(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor, cutout: bool = True) -> None:
        self.x, self.y, self.cutout = x, y, cutout

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Any:
        image = self.x[i]
        if self.cutout:
            r, c = torch.randint(0, 6, (2,)).tolist()
            image = image.clone()
            image[:, r : r + 3, c : c + 3] = 0.0
        return image, self.y[i]


class Buggy(Digits):
    cut_validation = True

    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        self.train = Patches(x[:cut], y[:cut])
        self.val = Patches(x[cut:], y[cut:], cutout=self.cut_validation)


class Healthy(Buggy):
    """The fix: cutout for the training split only."""

    cut_validation = False
