"""See what the loss function and backward() receive inside the user's own training_step.

A TorchFunctionMode intercepts `F.cross_entropy` (and `nn.CrossEntropyLoss`, which calls it),
the other common losses and `Tensor.backward`, whatever code path the task uses to reach them.
Arguments are recorded *before* the call, so a call that raises (labels >= num_classes) is still
on record for targets.contract.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

LOSSES = {
    F.cross_entropy: "cross_entropy",
    F.nll_loss: "nll_loss",
    F.binary_cross_entropy_with_logits: "binary_cross_entropy_with_logits",
    F.binary_cross_entropy: "binary_cross_entropy",
    F.mse_loss: "mse_loss",
    F.l1_loss: "l1_loss",
    F.smooth_l1_loss: "smooth_l1_loss",
    F.huber_loss: "huber_loss",
}
BACKWARDS = (torch.Tensor.backward, torch.autograd.backward)


@dataclass
class LossCall:
    name: str
    input: torch.Tensor
    target: torch.Tensor


class Spy(TorchFunctionMode):
    """Records loss calls and backward(retain_graph=...) while `active` (set per training step)."""

    def __init__(self, max_calls: int = 4) -> None:
        super().__init__()
        self.active = False
        self.max_calls = max_calls
        self.losses: list[LossCall] = []
        self.retain_graph_calls = 0
        self.backward_calls = 0
        # Weak references to every graph-attached tensor the watched steps created: the ones
        # still alive after their step are graphs the user's code kept (memory.graph_leak).
        self.graph_outputs: list[weakref.ref] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        if self.active:
            self._record(func, args, kwargs)
        result = func(*args, **kwargs)
        if self.active and isinstance(result, torch.Tensor) and result.grad_fn is not None:
            self.graph_outputs.append(weakref.ref(result))
        return result

    def live_graph_outputs(self) -> int:
        return sum(1 for ref in self.graph_outputs if ref() is not None)

    def _record(self, func: Any, args: tuple, kwargs: dict) -> None:
        name = LOSSES.get(func)
        if name is not None and len(self.losses) < self.max_calls:
            inp = args[0] if args else kwargs.get("input")
            tgt = args[1] if len(args) > 1 else kwargs.get("target")
            if isinstance(inp, torch.Tensor) and isinstance(tgt, torch.Tensor):
                self.losses.append(LossCall(name, inp.detach().clone(), tgt.detach().clone()))
        elif func in BACKWARDS:
            self.backward_calls += 1
            if kwargs.get("retain_graph") or (
                func is torch.autograd.backward and len(args) > 2 and args[2]
            ):
                self.retain_graph_calls += 1
