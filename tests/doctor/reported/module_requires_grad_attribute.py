"""`module.requires_grad = False` on an nn.Module sets a plain attribute: the layer meant to be
frozen keeps training.

Source: https://github.com/CSCYQJ/MICCAI23-ProtoContra-SFDA/issues/18
"""

from __future__ import annotations

from typing import Any

import torch

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net[1].requires_grad = False  # meant: freeze the first layer


class Healthy(Classifier):
    """The fix: requires_grad_(False) reaches the parameters (and the optimizer gets only the
    trainable ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.net[1].requires_grad_(False)

    def configure_optimizers(self) -> Any:
        trainable = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.Adam(trainable, lr=self.lr)
