"""NonFiniteGuard: a NaN/Inf loss or gradient stops the run, naming the batch.

Without it NaN weights train on for hours and every later metric is garbage.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch

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
        total = torch.nn.utils.get_total_norm(grads)
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
