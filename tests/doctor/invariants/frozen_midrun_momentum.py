"""The first layer is frozen after a short warm-up, but gradients are zeroed with
`set_to_none=False`: the frozen weights keep a zero gradient, and SGD's momentum and weight
decay go on moving them every step.

Invariant: what does not train does not change (optimizer.coverage).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self.global_step >= 3:  # from the step count, so a resumed run freezes it too
            self.net[1].requires_grad_(False)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad(set_to_none=False)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)


class Healthy(Buggy):
    """The fix: clear gradients to None (Lightning's default), so frozen tensors get none."""

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad()
