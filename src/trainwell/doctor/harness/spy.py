"""See what the loss function and backward() receive inside the user's own training_step.

A TorchFunctionMode intercepts the common losses (`nn.CrossEntropyLoss` calls F.cross_entropy)
and `Tensor.backward`, whatever code path reaches them. Arguments are recorded *before* the
call, so a call that raises (labels >= num_classes) is still on record for targets.contract."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

CLASS_INDEX = ("cross_entropy", "nll_loss")  # the losses that take class ids
BINARY = ("binary_cross_entropy_with_logits", "binary_cross_entropy")
VALUE_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")  # regression
LOSSES = {getattr(F, name): name for name in (*CLASS_INDEX, *BINARY, *VALUE_LOSSES)}
BACKWARDS = (torch.Tensor.backward, torch.autograd.backward)


@dataclass
class LossCall:
    name: str
    input: torch.Tensor
    target: torch.Tensor
    batch_index: int = 0  # which watched micro-batch made the call
    reduction: str = "mean"
    ignore_index: int | None = None  # class-index losses only
    value: float | None = None  # the loss it returned, when a scalar
    items: int | None = None  # what a mean reduction divided by (targets not ignored)
    producer: str | None = None  # the autograd op that made the input (None: no graph)
    weighted: bool = False  # a class-index loss given per-class weights
    live: torch.Tensor | None = None  # the input itself, graph kept (Spy(keep_inputs=True))


# Ops that only reshape, copy or select: the op before them made the values.
_RESHAPES = ("View", "Reshape", "Squeeze", "Unsqueeze", "Expand", "Permute", "Transpose")
_PASS_THROUGH = (*_RESHAPES, "Clone", "ToCopy", "Alias", "Select", "Slice")


def producer(t: torch.Tensor) -> str | None:
    """The name of the autograd op whose output `t` is, looking through reshapes and copies."""
    fn = t.grad_fn
    while fn is not None and type(fn).__name__.startswith(_PASS_THROUGH):
        fn = next((f for f, _ in fn.next_functions if f is not None), None)
    return None if fn is None else type(fn).__name__


def _items(name: str, inp: torch.Tensor, target: torch.Tensor, ignore: int | None) -> int:
    """The number of terms a mean-reduced loss averages over."""
    if name not in CLASS_INDEX:
        return int(inp.numel())
    if target.is_floating_point():  # class probabilities: one term per row
        return int(target.numel() // max(1, inp.shape[1] if inp.dim() > 1 else 1))
    return int((target != ignore).sum()) if ignore is not None else int(target.numel())


class Spy(TorchFunctionMode):
    """Records loss calls and backward(retain_graph=...) while `active` (set per training step).
    `reference_params`: at each recognised loss call, also take the gradient of the loss's own
    output for them (a manual window's reference), before the user's code scales it."""

    def __init__(
        self,
        max_calls: int = 4,
        reference_params: list[torch.nn.Parameter] | None = None,
        keep_inputs: bool = False,
    ) -> None:
        super().__init__()
        self.max_calls, self.reference_params = max_calls, reference_params
        self.keep_inputs, self.active, self.batch_index = keep_inputs, False, 0
        self.losses: list[LossCall] = []
        self.retain_graph_calls = self.backward_calls = 0
        self.retain_graph_batches: list[int] = []  # the watched micro-batch of each such call
        self.backward_batches: list[int] = []  # the watched micro-batch of every backward call
        self.backward_values: list[tuple[int, float]] = []  # (micro-batch, value backpropagated)
        self.reference_grads: list[list[torch.Tensor | None]] = []
        # Weak references to every graph-attached tensor the watched steps created: the ones
        # still alive after their step are graphs the user's code kept (memory.graph_leak).
        self.graph_outputs: list[weakref.ref] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        call = self._record(func, args, kwargs) if self.active else None
        result = func(*args, **kwargs)
        if self.active and isinstance(result, torch.Tensor):
            if result.grad_fn is not None:
                self.graph_outputs.append(weakref.ref(result))
            if call is not None and result.numel() == 1:
                call.value = float(result.detach())
                if self.reference_params is not None and result.requires_grad:
                    grads = torch.autograd.grad(
                        result, self.reference_params, retain_graph=True, allow_unused=True
                    )
                    self.reference_grads.append(list(grads))
        return result

    def watch(self, batch_index: int) -> None:
        self.batch_index = batch_index
        self.__enter__()
        self.active = True

    def leave(self) -> None:
        """Stop recording (also called on errors: a no-op when not recording)."""
        if self.active:
            self.active = False
            self.__exit__(None, None, None)

    def live_graph_outputs(self) -> int:
        return sum(1 for ref in self.graph_outputs if ref() is not None)

    def live_graph_nodes(self, cap: int = 100_000) -> int:
        """Autograd nodes reachable from the watched tensors still alive: a running total kept
        as a tensor (`total = total + loss`) holds one tensor, but its graph gains nodes every
        step (backward frees the activations, not the nodes, so no saved bytes pile up)."""
        seen: set[Any] = set()
        stack = [t.grad_fn for ref in self.graph_outputs if (t := ref()) is not None]
        while stack and len(seen) < cap:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            stack.extend(n for n, _ in node.next_functions)
        return len(seen)

    def calls_in(self, batch_index: int) -> list[LossCall]:
        return [c for c in self.losses if c.batch_index == batch_index]

    def _record(self, func: Any, args: tuple, kwargs: dict) -> LossCall | None:
        if func in BACKWARDS:
            self.backward_calls += 1
            self.backward_batches.append(self.batch_index)
            tensor = args[0] if args else kwargs.get("tensors")
            if isinstance(tensor, torch.Tensor) and tensor.numel() == 1:
                self.backward_values.append((self.batch_index, float(tensor.detach())))
            positional = func is torch.autograd.backward and len(args) > 2 and args[2]
            if kwargs.get("retain_graph") or positional:
                self.retain_graph_calls += 1
                self.retain_graph_batches.append(self.batch_index)
        name = LOSSES.get(func) if len(self.losses) < self.max_calls else None
        inp = args[0] if args else kwargs.get("input")
        tgt = args[1] if len(args) > 1 else kwargs.get("target")
        if name is None or not isinstance(inp, torch.Tensor) or not isinstance(tgt, torch.Tensor):
            return None
        ignore = int(kwargs.get("ignore_index", -100)) if name in CLASS_INDEX else None  # as in F
        call = LossCall(
            name,
            inp.detach().clone(),
            tgt.detach().clone(),
            batch_index=self.batch_index,
            reduction=str(kwargs.get("reduction", "mean")),
            ignore_index=ignore,
            items=_items(name, inp, tgt, ignore),
            producer=producer(inp),
            live=inp if self.keep_inputs else None,
            weighted=ignore is not None and (args[2:3] or [kwargs.get("weight")])[0] is not None,
        )
        self.losses.append(call)
        return call

    def steps_retaining_only(self) -> list[int]:
        """Watched micro-batches all of whose backward calls retain the graph: no later
        backward needs it, so retain_graph=True only keeps the activations alive."""
        kept = self.retain_graph_batches
        return sorted(b for b in set(kept) if kept.count(b) == self.backward_batches.count(b))
