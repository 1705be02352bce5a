"""A callback that watches a short real Lightning run: what the loop did, hook by hook.

The doctor never re-implements the training loop; it runs the user's task in a Trainer and
records at Lightning's hooks, so an overridden `optimizer_zero_grad`, `training_step`,
`configure_optimizers` or `backward` is exactly what gets observed.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import lightning as L
import torch
from torch import nn

from trainwell.doctor.harness.spy import Spy


def eval_mode_modules(module: nn.Module) -> list[str]:
    """Names of submodules in eval mode (the root is called 'task')."""
    return [name or "task" for name, m in module.named_modules() if not m.training]


def grad_norms(module: nn.Module) -> dict[str, float | None]:
    """Per trainable parameter: its gradient's L2 norm, or None when it has no gradient."""
    out: dict[str, float | None] = {}
    for name, p in module.named_parameters():
        if p.requires_grad:
            out[name] = None if p.grad is None else float(p.grad.detach().float().norm())
    return out


def _loss_of(outputs: Any) -> float | None:
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return float(loss.detach())
    return None


class _Saved:
    """What autograd stores for backward, wrapped so we can tell when it is freed."""

    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class Recorder(L.Callback):
    """Records per micro-batch / per optimizer step; `spy` sees loss calls inside training_step.

    A plain class, not a dataclass: Hydra's instantiate would turn a dataclass passed as a
    Trainer kwarg into a structured config.
    """

    def __init__(
        self,
        spy: Spy | None = None,
        watch_memory_steps: int = 0,
        freeze_stochastic: bool = False,
        keep_grad_tensors: bool = False,
        spy_batches: int | None = None,
    ) -> None:
        super().__init__()
        self.spy = spy
        self.watch_memory_steps = watch_memory_steps
        # micro-batches the spy watches (its TorchFunctionMode slows every torch call)
        self.spy_batches = watch_memory_steps if spy_batches is None else spy_batches
        # dropout p=0 and BatchNorm in eval, for exact gradient comparisons
        self.freeze_stochastic = freeze_stochastic
        self.keep_grad_tensors = keep_grad_tensors
        self.optimizer_params: list[set[int]] = []
        self.trainable_at_start: dict[str, int] = {}
        self.frozen_at_start: dict[str, int] = {}
        self.losses: list[float | None] = []
        self.lrs: list[float] = []  # per micro-batch, at its start
        self.step_grads: list[dict[str, float | None]] = []
        self.step_grad_tensors: list[dict[str, torch.Tensor]] = []
        self.micro_batches_per_step: list[int] = []
        self.stale_grad_norms: list[float] = []  # at window starts, before backward
        self.eval_modules: list[tuple[int, list[str]]] = []
        self.scheduler_counts: list[list[int]] = []  # scheduler.last_epoch at each optimizer step
        self.live_graph_tensors: list[int] = []
        self.retained_saved_bytes: list[int] = []
        self.batch_seconds: list[float] = []
        self.wait_seconds: list[float] = []
        self._since_step = 0
        self._backward_loss: float | None = None
        self._batches_seen = 0
        self._batch_started = 0.0
        self._batch_ended: float | None = None
        self._saved: list[weakref.ref] = []
        self._hooks: Any = None

    # -- setup -------------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._freeze(pl_module)

    def _freeze(self, pl_module: L.LightningModule) -> None:
        if not self.freeze_stochastic:
            return
        for m in pl_module.modules():
            if isinstance(m, nn.modules.dropout._DropoutNd):
                m.p = 0.0
            if isinstance(m, nn.MultiheadAttention):  # its attention dropout is a float
                m.dropout = 0.0
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()

    # -- micro-batch ---------------------------------------------------------------------------
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        if self._batch_ended is not None:
            self.wait_seconds.append(now - self._batch_ended)
        self._batch_started = now
        if batch_idx == 0 and not self.optimizer_params:
            # Every setup hook (configure_optimizers, setup, on_fit_start, on_train_start) has run.
            self.optimizer_params = [
                {id(p) for g in opt.param_groups for p in g["params"]} for opt in trainer.optimizers
            ]
            for name, p in pl_module.named_parameters():
                target = self.trainable_at_start if p.requires_grad else self.frozen_at_start
                target[name] = id(p)
        self._freeze(pl_module)
        off = eval_mode_modules(pl_module)
        if self.freeze_stochastic:
            off = []
        if off:
            self.eval_modules.append((batch_idx, off))
        if trainer.optimizers:
            self.lrs.append(float(trainer.optimizers[0].param_groups[0]["lr"]))
        self._backward_loss = None
        if self.spy is not None and self._batches_seen < self.spy_batches:
            self.spy.batch_index = self._batches_seen
            self.spy.__enter__()
            self.spy.active = True
        if len(self.retained_saved_bytes) < self.watch_memory_steps:
            self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            self._hooks.__enter__()

    def _pack(self, tensor: torch.Tensor) -> _Saved:
        saved = _Saved(tensor)
        self._saved.append(weakref.ref(saved))
        return saved

    @staticmethod
    def _unpack(saved: _Saved) -> torch.Tensor:
        return saved.tensor

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        # What a manual-optimization step backpropagates, when training_step returns no loss.
        self._backward_loss = float(loss.detach())
        if self._since_step == 0:
            # First micro-batch of a window: zero_grad has run, so no gradient may be left over.
            total = 0.0
            for p in pl_module.parameters():
                if p.grad is not None:
                    total += float(p.grad.detach().float().norm()) ** 2
            self.stale_grad_norms.append(total**0.5)

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        self.step_grads.append(grad_norms(pl_module))
        if self.keep_grad_tensors:
            self.step_grad_tensors.append(
                {
                    n: p.grad.detach().clone()
                    for n, p in pl_module.named_parameters()
                    if p.grad is not None
                }
            )
        self.micro_batches_per_step.append(self._since_step + 1)
        self.scheduler_counts.append(
            [int(getattr(c.scheduler, "last_epoch", -1)) for c in trainer.lr_scheduler_configs]
        )
        self._since_step = -1  # the batch-end hook brings it back to 0

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._since_step += 1
        self._batches_seen += 1
        loss = _loss_of(outputs)
        self.losses.append(loss if loss is not None else self._backward_loss)
        measuring = self._hooks is not None
        self._leave()
        if measuring:
            # After the step, a healthy loop holds no graph: backward freed the saved tensors.
            self.retained_saved_bytes.append(
                sum(
                    s.tensor.numel() * s.tensor.element_size()
                    for ref in self._saved
                    if (s := ref()) is not None and not isinstance(s.tensor, nn.Parameter)
                )
            )
            self._saved = []
            if self.spy is not None:
                self.live_graph_tensors.append(self.spy.live_graph_outputs())
        end = time.perf_counter()
        self.batch_seconds.append(end - self._batch_started)
        self._batch_ended = end

    def _leave(self) -> None:
        """Pop the spy mode and the saved-tensor hooks pushed at batch start (also on errors)."""
        if self.spy is not None and self.spy.active:
            self.spy.active = False
            self.spy.__exit__(None, None, None)
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._leave()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._batch_ended = None  # validation time is not data wait
