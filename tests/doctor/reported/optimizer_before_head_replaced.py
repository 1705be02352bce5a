"""The optimizer is built, then the classifier head is replaced (fine-tuning for a new label
set): the optimizer still holds the old head's tensors, so the new head never trains.

Source: https://github.com/pytorch/pytorch/issues/54765 (and https://github.com/microsoft/nni/issues/4521)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.doctor.reported._common import Classifier


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        self.net[3] = nn.Linear(32, 10)  # the new head for this label set

    def configure_optimizers(self) -> Any:
        return self.opt


class Healthy(Buggy):
    """The fix: build the optimizer after the model is final (in configure_optimizers)."""

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.lr)
