"""Validation images made from training images moved down by one pixel, the freed top row filled
with the background: the bottom row each image loses often holds ink, so comparing whole images,
even after moving them back, finds no copy.

Invariant: no evaluation sample is a near copy of a training sample (data.leakage).
"""

from __future__ import annotations

from torch.utils.data import TensorDataset

from tests.doctor.reported._common import Digits, digits


def _standardised() -> tuple:
    x, y = digits()
    return (x - x.mean()) / x.std(), y


class Buggy(Digits):
    def setup(self, stage: str | None = None) -> None:
        x, y = _standardised()
        cut = int(0.8 * len(x))
        self.train = TensorDataset(x[:cut], y[:cut])
        n = len(x) - cut
        moved = x[:n].clone()
        moved[..., 1:, :] = x[:n, ..., :-1, :]  # one pixel down
        moved[..., 0, :] = x.min()  # the freed row: background
        self.val = TensorDataset(moved, y[:n])


class Healthy(Digits):
    """The fix: validation images that training never saw."""

    def setup(self, stage: str | None = None) -> None:
        x, y = _standardised()
        cut = int(0.8 * len(x))
        self.train = TensorDataset(x[:cut], y[:cut])
        self.val = TensorDataset(x[cut:], y[cut:])
