"""test_step reuses the training augmentation (Gaussian input noise): validation is clean,
but every test run reports a different accuracy for the same weights.

Invariant: same weights, same data, same numbers, for test too (eval.determinism).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    noise = 0.5

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        x = x + self.noise * torch.randn_like(x)
        self.log("test_acc", (self(x).argmax(-1) == y).float().mean())


class Healthy(Buggy):
    """The fix: no augmentation at test time."""

    noise = 0.0
