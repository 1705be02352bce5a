"""Validation inputs and labels served by two loaders zipped together, each with its own
shuffle: batch for batch they pair images with the labels of other images.

Invariant: validation measures what training learns (data.split_agreement).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch.utils.data import DataLoader

from tests.doctor.reported._common import Digits


class Buggy(Digits):
    shuffle = True

    def val_dataloader(self) -> Iterable[Any]:
        x, y = self.val.tensors  # type: ignore[attr-defined]
        inputs = DataLoader(x, batch_size=64, shuffle=self.shuffle)
        labels = DataLoader(y, batch_size=64, shuffle=self.shuffle)
        return list(zip(inputs, labels, strict=True))


class Healthy(Buggy):
    """The fix: the two loaders in one order (or one loader over (input, label) pairs)."""

    shuffle = False
