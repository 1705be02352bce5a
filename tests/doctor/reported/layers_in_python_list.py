"""Hidden layers kept in a Python list: nn.Module never registers them, so they never train.

Source: https://github.com/pytorch/pytorch/issues/666
"""

from __future__ import annotations

import torch
from torch import nn

from tests.doctor.reported._common import Classifier


class ListNet(nn.Module):
    def __init__(self, depth: int = 2, registered: bool = False) -> None:
        super().__init__()
        self.inp = nn.Linear(64, 32)
        hidden = [nn.Linear(32, 32) for _ in range(depth)]
        self.hidden = nn.ModuleList(hidden) if registered else hidden
        self.out = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.inp(x.flatten(1)))
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x)


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net = ListNet()


class Healthy(Classifier):
    """The fix: nn.ModuleList registers every layer."""

    def __init__(self) -> None:
        super().__init__()
        self.net = ListNet(registered=True)
