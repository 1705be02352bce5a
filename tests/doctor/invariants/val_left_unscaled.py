"""The training images are scaled to [0, 1] in the training dataset's transform, and the
validation dataset was given a transform without the scaling: validation reads the raw 0-16
pixels. Under a ReLU net accuracy barely moves while the validation loss does.

Invariant: every split comes from the distribution it claims (data.split_distribution).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from sklearn.datasets import load_digits
from torch.utils.data import Dataset

from tests.doctor.reported._common import Digits


def to_unit(image: torch.Tensor) -> torch.Tensor:
    return image / 16.0


def as_is(image: torch.Tensor) -> torch.Tensor:
    return image


class Images(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor, transform: Callable) -> None:
        self.x, self.y, self.transform = x, y, transform

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Any:
        return self.transform(self.x[i]), self.y[i]


class Buggy(Digits):
    val_transform: Callable = staticmethod(as_is)

    def setup(self, stage: str | None = None) -> None:
        x, y = load_digits(return_X_y=True)
        x = torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8)
        y = torch.tensor(y)
        cut = int(0.8 * len(x))
        self.train = Images(x[:cut], y[:cut], to_unit)
        self.val = Images(x[cut:], y[cut:], self.val_transform)


class Healthy(Buggy):
    """The fix: the validation transform scales too."""

    val_transform = staticmethod(to_unit)
