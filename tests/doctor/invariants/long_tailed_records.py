"""A map-style training set of {"image", "label", "id"} records, long-tailed (every zero, but
one in twelve of the other digits), with nothing in the loss or the sampling to make up for it.
The records are no (input, label) pairs and the dataset has no `targets` attribute: the class
ids are only in the batches.

Invariant: training classes are balanced, or something compensates (data.class_balance).
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from tests.doctor.invariants.dict_val_labels_shuffled_apart import Model as RecordsModel
from tests.doctor.invariants.dict_val_labels_shuffled_apart import Records
from tests.doctor.reported._common import Digits, digits

KEEP_ONE_IN = 12


class TaggedRecords(Records):
    """One {"image", "label", "id"} record per sample, the id a string (a file name)."""

    def __getitem__(self, i: int) -> dict:
        return {**super().__getitem__(i), "id": f"digit-{i}.png"}


class Model(RecordsModel):
    """The digits classifier on dict batches (the id is read by nobody)."""


class Buggy(Digits):
    repeat = 1

    def long_tail(self, x: torch.Tensor, y: torch.Tensor) -> Dataset:
        """Every 0, one in KEEP_ONE_IN of the others; each rare sample `repeat` times."""
        keep = (y == 0) | (torch.arange(len(y)) % KEEP_ONE_IN == 0)
        x, y = x[keep], y[keep]
        order = torch.tensor(
            [i for i in range(len(y)) for _ in range(1 if y[i] == 0 else self.repeat)]
        )
        return TaggedRecords(x[order], y[order])

    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        self.train = self.long_tail(x[:cut], y[:cut])
        self.val = Records(x[cut:], y[cut:])


class Healthy(Buggy):
    """The fix: the rare classes are oversampled back to the head's size."""

    repeat = KEEP_ONE_IN
