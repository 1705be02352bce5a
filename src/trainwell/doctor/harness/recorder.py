"""A callback that watches a short real Lightning run, hook by hook: the doctor never
re-implements the loop, so whatever hook the task overrides is exactly what gets observed."""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
from torch import nn

from trainwell.blocks.layers import BATCH_NORMS, DROPOUTS
from trainwell.doctor.harness.spy import Spy

ZEROING_STEPS = 50  # optimizer steps grad.zeroing watches (a pass over every parameter each)


def frozen_modules(module: nn.Module) -> list[str]:
    """Submodules that hold parameters, none of them trainable (a frozen backbone, a frozen BN)."""
    return [
        name
        for name, m in module.named_modules()
        if (own := list(m.parameters())) and not any(p.requires_grad for p in own)
    ]


def frozen_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """What training must leave as it is: parameters with requires_grad=False, and the buffers
    of modules whose own parameters are all frozen (a frozen BatchNorm's running statistics)."""
    state = {n: p for n, p in module.named_parameters() if not p.requires_grad}
    for prefix, m in module.named_modules():
        if (own := list(m.parameters(recurse=False))) and not any(p.requires_grad for p in own):
            state |= {f"{prefix}.{n}".lstrip("."): b for n, b in m.named_buffers(recurse=False)}
    return state


def grad_norms(module: nn.Module) -> dict[str, float | None]:
    return {
        name: None if p.grad is None else float(p.grad.detach().float().norm())
        for name, p in module.named_parameters()
        if p.requires_grad
    }


def param_ids(optimizer: Any) -> set[int]:
    return {id(p) for g in optimizer.param_groups for p in g["params"]}


def grad_copies(module: nn.Module, only: set[int] | None = None) -> dict[str, torch.Tensor]:
    return {
        n: p.grad.detach().clone()
        for n, p in module.named_parameters()
        if p.grad is not None and (only is None or id(p) in only)
    }


def scalar_loss(outputs: Any) -> torch.Tensor | None:
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return loss if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


class Recorder(L.Callback):
    """Records per micro-batch / per optimizer step; `spy` sees loss calls inside training_step.
    Not a dataclass: Hydra's instantiate would turn one passed to the Trainer into a config."""

    def __init__(
        self,
        spy: Spy | None = None,
        watch_memory_steps: int = 0,
        freeze_stochastic: bool = False,
        keep_grad_tensors: bool = False,
        spy_batches: int | None = None,
    ) -> None:
        self.spy, self.watch_memory_steps = spy, watch_memory_steps
        # micro-batches the spy watches (its TorchFunctionMode slows every torch call)
        self.spy_batches = watch_memory_steps if spy_batches is None else spy_batches
        # freeze_stochastic: dropout p=0 and BatchNorm in eval, for exact gradient comparisons
        self.freeze_stochastic, self.keep_grad_tensors = freeze_stochastic, keep_grad_tensors
        self.optimizer_params: list[set[int]] = []
        self.trainable_at_start: dict[str, int] = {}
        self.frozen_at_start: dict[str, int] = {}
        self.losses: list[float | None] = []
        self.step_grads: list[dict[str, float | None]] = []
        self.step_grad_tensors: list[dict[str, torch.Tensor]] = []
        # per optimizer step: (step, parameters holding gradients from before its last step, norm)
        self.stale_steps: list[tuple[int, list[str], float]] = []
        self._cleared: dict[int, bool] = {}  # param id -> grad seen None/zero since its step
        self._stepped: set[int] = set()  # param ids some optimizer has already stepped
        self.eval_modules: list[tuple[int, list[str]]] = []
        # frozen tensor name -> its value when first seen frozen (dropped if it is unfrozen)
        self.frozen_values: dict[str, torch.Tensor] = {}
        self.live_graph_tensors: list[int] = []
        self.live_graph_nodes: list[int] = []
        self.batch_seconds: list[float] = []
        self.wait_seconds: list[float] = []
        self.stepping_batches = 0  # micro-batches in which an optimizer stepped
        self._since_step, self._batch_started = 0, 0.0
        self._backward_loss: float | None = None
        self._batch_ended: float | None = None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch_started = time.perf_counter()
        if self._batch_ended is not None:
            self.wait_seconds.append(self._batch_started - self._batch_ended)
        if batch_idx == 0 and not self.optimizer_params:
            # Every setup hook (configure_optimizers, setup, on_fit_start, on_train_start) has run.
            self.optimizer_params = [param_ids(opt) for opt in trainer.optimizers]
            for name, p in pl_module.named_parameters():
                (self.trainable_at_start if p.requires_grad else self.frozen_at_start)[name] = id(p)
        if self.freeze_stochastic:
            for m in pl_module.modules():
                if isinstance(m, DROPOUTS):
                    m.p = 0.0
                if isinstance(m, nn.MultiheadAttention):  # its attention dropout is a float
                    m.dropout = 0.0
                if isinstance(m, BATCH_NORMS):
                    m.eval()
        else:  # the exact-gradient probes put BatchNorm in eval themselves
            # Copy each tensor the first batch it is frozen (a freeze after a warm-up counts
            # from then); a tensor unfrozen later (gradual unfreezing) may change and is dropped.
            state = frozen_state(pl_module)
            kept = {n: t for n, t in self.frozen_values.items() if n in state}
            new = {n: t.detach().clone() for n, t in state.items() if n not in kept}
            self.frozen_values = kept | new
            if off := [n or "task" for n, m in pl_module.named_modules() if not m.training]:
                self.eval_modules.append((batch_idx, off))
        self._backward_loss = None
        if self.spy is not None and len(self.losses) < self.spy_batches:
            self.spy.watch(len(self.losses))

    def frozen_changes(self, pl_module: L.LightningModule) -> dict[str, float]:
        state = frozen_state(pl_module)
        changes = {}
        for name, before in self.frozen_values.items():
            now = state.get(name)
            if now is not None and now.shape == before.shape and not torch.equal(now, before):
                changes[name] = float((now.detach().double() - before.double()).abs().max())
        return changes

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        # What a manual-optimization step backpropagates, when training_step returns no loss.
        self._backward_loss = float(loss.detach())
        if len(self.stale_steps) < ZEROING_STEPS:
            # A gradient seen None/zero before a backward was cleared: what that backward and
            # the ones after it add up to is the next update, with nothing from older steps.
            for p in pl_module.parameters():
                if p.grad is None or not bool(p.grad.any()):
                    self._cleared[id(p)] = True

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        self.step_grads.append(grad_norms(pl_module))
        self._note_stale(pl_module, optimizer)
        if self.keep_grad_tensors:
            self.step_grad_tensors.append(grad_copies(pl_module))
        self._since_step = -1  # the batch-end hook brings it back to 0

    def _note_stale(self, pl_module: L.LightningModule, optimizer: Any) -> None:
        """Which of this optimizer's parameters carry gradients from before its last step: per
        optimizer, not per micro-batch (a GAN's discriminator keeps its gradients while the
        generator steps, and zeroes them right before its own backward: no leak)."""
        if len(self.stale_steps) >= ZEROING_STEPS:
            return
        ids = param_ids(optimizer)
        if seen := ids & self._stepped:
            stale = [
                (name, p)
                for name, p in pl_module.named_parameters()
                if id(p) in seen and p.grad is not None and not self._cleared.get(id(p), False)
            ]
            norm = sum(float(p.grad.detach().float().norm()) ** 2 for _, p in stale) ** 0.5
            self.stale_steps.append((len(self.step_grads) - 1, [n for n, _ in stale], norm))
        self._cleared |= dict.fromkeys(ids, False)
        self._stepped |= ids

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, *_: Any
    ) -> None:
        self._since_step += 1
        self.stepping_batches += self._since_step == 0
        loss = scalar_loss(outputs)
        self.losses.append(self._backward_loss if loss is None else float(loss.detach()))
        if self.spy is not None:
            self.spy.leave()
        if self.spy is not None and len(self.live_graph_nodes) < self.watch_memory_steps:
            # After the step, a healthy loop holds no graph; one kept from each step adds up.
            self.live_graph_tensors.append(self.spy.live_graph_outputs())
            self.live_graph_nodes.append(self.spy.live_graph_nodes())
        self._batch_ended = time.perf_counter()
        self.batch_seconds.append(self._batch_ended - self._batch_started)

    def on_exception(self, *args: Any) -> None:
        if self.spy is not None:
            self.spy.leave()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._batch_ended = None  # validation time is not data wait
