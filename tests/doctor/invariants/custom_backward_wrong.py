"""A hand-written Swish activation as a torch.autograd.Function whose backward drops a term of
the derivative: every parameter still gets a finite, non-zero gradient, just not the loss's.

Invariant: gradients match the loss (grad.flow: finite differences vs autograd).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.doctor.reported._common import Classifier


class Swish(torch.autograd.Function):
    exact = False

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @classmethod
    def backward(cls, ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s * (1 + x * (1 - s)) if cls.exact else s)


class ExactSwish(Swish):
    exact = True


class Activation(nn.Module):
    function: type[Swish] = Swish

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function.apply(x)


class ExactActivation(Activation):
    function = ExactSwish


class Buggy(Classifier):
    activation: type[nn.Module] = Activation

    def __init__(self) -> None:
        super().__init__()
        self.net[2] = self.activation()


class Healthy(Buggy):
    """The fix: the full derivative, s * (1 + x * (1 - s))."""

    activation = ExactActivation
