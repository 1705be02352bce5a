"""Where a manual-optimization training_step zeroes and steps, and what it steps with.

With `automatic_optimization = False` the user's code decides when gradients are cleared and
applied (its own accumulation). `StepWatch` observes that during a real fit: it wraps
`zero_grad` on the optimizers the module can reach (the torch optimizers and the
LightningOptimizers `self.optimizers()` returns) and registers a step pre-hook, recording each
event with the micro-batch it happened in, the optimizer and how many backward calls preceded
it; at each optimizer's first step it keeps a copy of the gradients that optimizer is about to
apply to its own parameters, and the weights at the start of each micro-batch that follows a
step (a window that starts there is compared from them).
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
    optimizer: int = 0  # its index in trainer.optimizers


class StepWatch(L.Callback):
    def __init__(self, spy: Spy) -> None:
        self.spy = spy
        self.events: list[Event] = []
        self.grads: dict[int, dict[str, torch.Tensor]] = {}  # per optimizer, at its first step
        self.states: dict[int, dict[str, torch.Tensor]] = {}  # micro-batch -> weights at its start
        self._stepped = False  # a step since the last micro-batch started
        self.optimizers = 0
        self._torch: list[Any] = []  # trainer.optimizers
        self._batch = -1
        self._module: L.LightningModule | None = None
        self._patched: list[Any] = []
        self._handles: list[Any] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._module = pl_module
        self.optimizers = len(trainer.optimizers)
        self._torch = list(trainer.optimizers)
        wrapped = pl_module.optimizers(use_pl_optimizer=True)
        wrapped = wrapped if isinstance(wrapped, list) else [wrapped]
        for optimizer in [*trainer.optimizers, *wrapped]:
            self._wrap_zero_grad(optimizer)
        for optimizer in trainer.optimizers:
            self._handles.append(optimizer.register_step_pre_hook(self._before_step))

    def _wrap_zero_grad(self, optimizer: Any) -> None:
        original = optimizer.zero_grad
        index = self._index(optimizer)

        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self.events.append(Event("zero", self._batch, self.spy.backward_calls, index))
            return original(*args, **kwargs)

        optimizer.zero_grad = zero_grad  # an instance attribute shadows the class method
        self._patched.append(optimizer)

    def _index(self, optimizer: Any) -> int:
        inner = getattr(optimizer, "optimizer", optimizer)  # a LightningOptimizer's own
        return next((i for i, o in enumerate(self._torch) if o is inner), 0)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        index = self._index(optimizer)
        self.events.append(Event("step", self._batch, self.spy.backward_calls, index))
        self._stepped = True
        if index not in self.grads and self._module is not None:
            own = {id(p) for g in optimizer.param_groups for p in g["params"]}
            self.grads[index] = {
                n: p.grad.detach().clone()
                for n, p in self._module.named_parameters()
                if p.grad is not None and id(p) in own
            }

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch = batch_idx
        if self._stepped and len(self.grads) < self.optimizers:
            self.states[batch_idx] = {k: t.clone() for k, t in pl_module.state_dict().items()}
        self._stepped = False

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        # Every optimizer has taken its first step: nothing more to watch.
        if self.optimizers and len(self.grads) == self.optimizers:
            trainer.should_stop = True

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for handle in self._handles:
            handle.remove()
        for optimizer in self._patched:
            optimizer.__dict__.pop("zero_grad", None)
        self._handles, self._patched = [], []

    def first_step(self, optimizer: int = 0) -> Event | None:
        return next((e for e in self.events if e.kind == "step" and e.optimizer == optimizer), None)

    def weights_at(self, batch: int, initial: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The weights at the start of micro-batch `batch` (`initial`: those of the fit's start)."""
        kept = [b for b in self.states if b <= batch]
        return self.states[max(kept)] if kept else initial

    def window_start(self, zero: Event) -> int:
        """The first micro-batch whose gradient a step after `zero` applies: the zero's own,
        unless that micro-batch's backward came before the zero."""
        before = sum(1 for b in self.spy.backward_batches if b < zero.batch)
        return zero.batch if zero.backwards == before else zero.batch + 1

    def zeros_before(self, step: Event) -> list[Event]:
        before = self.events[: self.events.index(step)]
        return [e for e in before if e.kind == "zero" and e.optimizer == step.optimizer]
