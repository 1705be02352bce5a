"""A max-norm constraint applied in place to every Linear layer after each step, the frozen
pretrained one included: the layer nobody trains is rewritten every batch.

Invariant: what does not train does not change (optimizer.coverage).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    only_trainable = False

    def __init__(self) -> None:
        super().__init__()
        self.net[1].requires_grad_(False)  # the "pretrained" first layer stays as it is

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        with torch.no_grad():
            for layer in self.net:
                if isinstance(layer, nn.Linear) and (
                    layer.weight.requires_grad or not self.only_trainable
                ):
                    norms = layer.weight.norm(dim=1, keepdim=True).clamp(min=0.5)
                    layer.weight.mul_(0.5 / norms)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam([p for p in self.parameters() if p.requires_grad], lr=self.lr)


class Healthy(Buggy):
    """The fix: constrain only the layers that train."""

    only_trainable = True
