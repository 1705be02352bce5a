"""The validation dataset is built with the training transform (a random horizontal flip), a
copy-paste of the line above it: validation images are flipped at random on each read.

Invariant: evaluation is a function of the weights; a validation item read twice is the same
tensor (eval.determinism).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tests.doctor.invariants.val_left_unscaled import Images, as_is
from tests.doctor.reported._common import Digits, digits


def random_flip(image: torch.Tensor) -> torch.Tensor:
    return image.flip(-1) if torch.rand(()) < 0.5 else image


class Buggy(Digits):
    train_transform: Callable = staticmethod(random_flip)
    val_transform: Callable = staticmethod(random_flip)

    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        self.train = Images(x[:cut], y[:cut], self.train_transform)
        self.val = Images(x[cut:], y[cut:], self.val_transform)


class Healthy(Buggy):
    """The fix: validation gets its own transform, without the random flip."""

    val_transform = staticmethod(as_is)
