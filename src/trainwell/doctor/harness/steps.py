"""Where a manual-optimization training_step zeroes and steps, and what it steps with.

With `automatic_optimization = False` the user's code decides when gradients are cleared and
applied (its own accumulation). `StepWatch` observes that during a real fit: it wraps
`zero_grad` on the optimizers the module can reach (the torch optimizers and the
LightningOptimizers `self.optimizers()` returns) and registers a step pre-hook, recording each
event with the micro-batch it happened in and how many backward calls preceded it; at the first
step it keeps a copy of the gradients the optimizer is about to apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lightning as L
import torch

from trainwell.doctor.harness.spy import Spy


@dataclass(frozen=True)
class Event:
    kind: str  # zero | step
    batch: int  # micro-batch index in the probe fit
    backwards: int  # backward calls seen before it


class StepWatch(L.Callback):
    def __init__(self, spy: Spy) -> None:
        self.spy = spy
        self.events: list[Event] = []
        self.grads: dict[str, torch.Tensor] | None = None
        self.optimizers = 0
        self._batch = -1
        self._module: L.LightningModule | None = None
        self._patched: list[Any] = []
        self._handles: list[Any] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._module = pl_module
        self.optimizers = len(trainer.optimizers)
        wrapped = pl_module.optimizers(use_pl_optimizer=True)
        wrapped = wrapped if isinstance(wrapped, list) else [wrapped]
        for optimizer in [*trainer.optimizers, *wrapped]:
            self._wrap_zero_grad(optimizer)
        for optimizer in trainer.optimizers:
            self._handles.append(optimizer.register_step_pre_hook(self._before_step))

    def _wrap_zero_grad(self, optimizer: Any) -> None:
        original = optimizer.zero_grad

        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self.events.append(Event("zero", self._batch, self.spy.backward_calls))
            return original(*args, **kwargs)

        optimizer.zero_grad = zero_grad  # an instance attribute shadows the class method
        self._patched.append(optimizer)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.events.append(Event("step", self._batch, self.spy.backward_calls))
        if self.grads is None and self._module is not None:
            self.grads = {
                n: p.grad.detach().clone()
                for n, p in self._module.named_parameters()
                if p.grad is not None
            }

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch = batch_idx

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for handle in self._handles:
            handle.remove()
        for optimizer in self._patched:
            optimizer.__dict__.pop("zero_grad", None)
        self._handles, self._patched = [], []

    def first_step(self) -> Event | None:
        return next((e for e in self.events if e.kind == "step"), None)

    def zeros_before(self, step: Event) -> list[Event]:
        return [e for e in self.events[: self.events.index(step)] if e.kind == "zero"]
