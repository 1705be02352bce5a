"""The augmentation is set on the whole dataset, which `random_split` then cuts into train and
validation: both subsets read through it, so every validation image is shifted at random on
each read, and two validation passes of the same weights give different numbers.

Invariant: evaluation is a function of the weights; a validation item read twice is the same
tensor (eval.determinism).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset, Subset, TensorDataset, random_split

from tests.doctor.reported._common import Digits, digits


class Shifted(Dataset):
    """Each image rolled by up to one pixel each way, at random."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Any:
        dy, dx = torch.randint(-1, 2, (2,)).tolist()
        return self.x[i].roll((dy, dx), dims=(1, 2)), self.y[i]


class Buggy(Digits):
    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        split = torch.Generator().manual_seed(0)
        self.train, self.val = random_split(Shifted(x, y), [cut, len(x) - cut], split)


class Healthy(Digits):
    """The fix: the same split, validation read from the images as they are."""

    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        split = torch.Generator().manual_seed(0)
        train, val = random_split(range(len(x)), [cut, len(x) - cut], split)
        self.train = Subset(Shifted(x, y), list(train))
        self.val = Subset(TensorDataset(x, y), list(val))
