"""Labels arrive as class names and each split builds its own name -> id map in the order the
names first appear: the same name gets different ids in training and validation.

Invariant: validation measures what training learns (data.split_agreement).
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from tests.doctor.reported._common import Digits, digits

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def ids(names: list[str], mapping: dict[str, int]) -> torch.Tensor:
    return torch.tensor([mapping[n] for n in names])


def first_seen(names: list[str]) -> dict[str, int]:
    return {name: i for i, name in enumerate(dict.fromkeys(names))}


class Buggy(Digits):
    def mapping(self, train_names: list[str], names: list[str]) -> dict[str, int]:
        return first_seen(names)  # this split's own map

    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        names = [NAMES[int(i)] for i in y]
        train, val = names[:cut], names[cut:]
        self.train = TensorDataset(x[:cut], ids(train, first_seen(train)))
        self.val = TensorDataset(x[cut:], ids(val, self.mapping(train, val)))


class Healthy(Buggy):
    """The fix: one map, built from the training names, used by every split."""

    def mapping(self, train_names: list[str], names: list[str]) -> dict[str, int]:
        return first_seen(train_names)
