"""Guards during real training: cheap callbacks that turn silent failures into a stop or a curve.

- `NonFiniteGuard`: a NaN/Inf loss or gradient stops the run, naming the batch, and points to the
  doctor (without it, NaN weights train on for hours and every later metric is garbage).
- `GradNormMonitor`: total + per-layer gradient norms to the loggers every N optimizer steps
  (the earliest signal of a missing zero_grad or an LR blow-up, seed 004).
- `TrainModeGuard`: at every training epoch start the task must be back in train mode (custom
  validation code that calls .eval() would otherwise freeze BatchNorm and dropout silently).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from torch.distributed.tensor import DTensor

DOCTOR_HINT = "run `python scripts/doctor.py` with the same overrides (data.finite, grad.flow)"


class NonFiniteLossError(RuntimeError):
    """Training produced a non-finite loss or gradient; the message names the batch."""


class NonFiniteGuard(L.Callback):
    """Stops the run at the first non-finite loss (every micro-batch) or gradient (every step).

    On CPU both checks are immediate. On a GPU with `sync_every=N > 1` they keep a device-side
    "first bad batch/step" and read it every N batches/steps, so they add no per-step host sync;
    the index reported is still the exact first one (the run stops up to N-1 steps later).
    Gradients are not checked under fp16 loss scaling, where an Inf gradient is the scaler's
    normal way of skipping a step.
    """

    def __init__(self, check_grads: bool = True, sync_every: int = 1) -> None:
        super().__init__()
        self.check_grads = check_grads
        self.sync_every = max(1, sync_every)
        self._first_bad: torch.Tensor | None = None
        self._grad_bad: torch.Tensor | None = None
        self._seen = 0

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not isinstance(loss, torch.Tensor):
            return
        if loss.device.type == "cpu":  # no device to keep busy: check now, cheapest
            if not math.isfinite(float(loss.detach().sum())):
                self._first_bad = torch.tensor(batch_idx)
                self._raise_if_bad(trainer)
            return
        index = torch.tensor(batch_idx, device=loss.device)
        bad = ~torch.isfinite(loss.detach()).all()
        if self._first_bad is None:
            self._first_bad = torch.full((), -1, device=loss.device, dtype=torch.long)
        self._first_bad = torch.where(bad & (self._first_bad < 0), index, self._first_bad)
        self._seen += 1
        if self._seen % self.sync_every == 0:
            self._raise_if_bad(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._raise_if_bad(trainer)

    def _raise_if_bad(self, trainer: L.Trainer) -> None:
        if self._first_bad is None:
            return
        first = int(self._first_bad)
        if first >= 0:
            raise NonFiniteLossError(
                f"non-finite training loss at epoch {trainer.current_epoch} batch {first}: a NaN/Inf "
                f"input, label or overflow; {DOCTOR_HINT}"
            )

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        if not self.check_grads or getattr(trainer.precision_plugin, "scaler", None) is not None:
            return
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if not grads:
            return
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        if total.device.type != "cpu" and self.sync_every > 1:
            # Same deferral as the loss: a device-side "first bad step", read every N steps.
            step = torch.tensor(trainer.global_step, device=total.device)
            if self._grad_bad is None:
                self._grad_bad = torch.full((), -1, device=total.device, dtype=torch.long)
            bad = ~torch.isfinite(total) & (self._grad_bad < 0)
            self._grad_bad = torch.where(bad, step, self._grad_bad)
            if trainer.global_step % self.sync_every == 0 and int(self._grad_bad) >= 0:
                raise NonFiniteLossError(
                    f"non-finite gradient at optimizer step {int(self._grad_bad)}; {DOCTOR_HINT}"
                )
            return
        if not bool(torch.isfinite(total)):
            bad = [
                n
                for n, p in pl_module.named_parameters()
                if p.grad is not None and not bool(torch.isfinite(p.grad).all())
            ]
            raise NonFiniteLossError(
                f"non-finite gradient at optimizer step {trainer.global_step} (epoch "
                f"{trainer.current_epoch}, batch {trainer.fit_loop.epoch_loop.batch_idx}) in "
                f"{len(bad)} tensor(s), first `{bad[0] if bad else '?'}`; {DOCTOR_HINT}"
            )


def _full(grad: torch.Tensor) -> torch.Tensor:
    """Under FSDP2 a gradient is a DTensor shard: the layer's norm needs the whole tensor
    (a collective, so every rank calls this on the same steps)."""
    return grad.full_tensor() if isinstance(grad, DTensor) else grad


class GradNormMonitor(L.Callback):
    """Logs `grad_norm/total` and `grad_norm/<layer>` every `every_n_steps` optimizer steps.

    A layer is a parameter's owning module (`net.features.0` for `net.features.0.weight`). Norms
    are computed only on logging steps: one fused foreach_norm over the gradients.
    """

    def __init__(self, every_n_steps: int = 50, per_layer: bool = True) -> None:
        super().__init__()
        self.every_n_steps = max(1, every_n_steps)
        self.per_layer = per_layer

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        if trainer.global_step % self.every_n_steps or not trainer.loggers:
            return
        named = [(n, _full(p.grad)) for n, p in pl_module.named_parameters() if p.grad is not None]
        if not named:
            return
        norms = torch._foreach_norm([g for _, g in named])
        squares = torch.stack(norms).float() ** 2
        metrics = {"grad_norm/total": float(squares.sum().sqrt())}
        if self.per_layer:
            layers: dict[str, float] = {}
            for (name, _), sq in zip(named, squares.tolist(), strict=True):
                layer = name.rsplit(".", 1)[0]
                layers[layer] = layers.get(layer, 0.0) + sq
            metrics |= {f"grad_norm/{k}": v**0.5 for k, v in layers.items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)


class TrainModeGuard(L.Callback):
    """Stops the run when a module is in eval mode at the start of a training epoch.

    `allow_eval` lists module-name prefixes that are deliberately kept in eval (a frozen
    backbone whose BatchNorm statistics must not move).
    """

    def __init__(self, allow_eval: Sequence[str] = ()) -> None:
        super().__init__()
        self.allow_eval = tuple(allow_eval)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        off = [
            name or "task"
            for name, m in pl_module.named_modules()
            if not m.training and not (name and name.startswith(self.allow_eval))
        ]
        if off:
            raise RuntimeError(
                f"{len(off)} module(s) are in eval mode at the start of training epoch "
                f"{trainer.current_epoch} (first: `{off[0]}`), so BatchNorm and dropout run in "
                "inference mode while training; remove the stray .eval() or list the module in "
                "callbacks.train_mode_guard.allow_eval"
            )
