"""NonFiniteGuard: a NaN/Inf loss or gradient stops the run, naming the batch.

Without it NaN weights train on for hours and every later metric is garbage.
"""

from __future__ import annotations

import cmath
import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch.distributed.tensor import DTensor

from trainwell.callbacks import cadence
from trainwell.callbacks.cadence import is_reading_step

DOCTOR_HINT = "run `python scripts/doctor.py` with the same overrides (data.finite, grad.flow)"
_NONE = 2**62  # "no bad batch yet": larger than any code, so a min over ranks keeps the first
_BATCH_BITS = 32  # a micro-batch is recorded as epoch << 32 | batch index


class NonFiniteLossError(RuntimeError):
    """Training produced a non-finite loss or gradient; the message names the batch."""


def _local(grad: torch.Tensor) -> torch.Tensor:
    # Under FSDP2 a gradient is a DTensor shard: whether *this rank's* part is finite needs no
    # collective; the ranks' verdicts are combined when they are read.
    return grad.to_local() if isinstance(grad, DTensor) else grad


def _finite_value(loss: torch.Tensor) -> bool:
    """One process on the CPU: whether every value of `loss` is finite. A scalar loss (the usual
    case) is read as it is: one read, no kernel; a larger one through its sum (a NaN or Inf
    anywhere makes the sum NaN or Inf)."""
    value = loss.item() if loss.numel() == 1 else loss.detach().sum().item()
    return math.isfinite(abs(value))  # abs: a complex value's modulus


def _all_finite(grads: list[torch.Tensor]) -> bool:
    """One process on the CPU: whether every gradient is finite.

    A NaN or Inf anywhere makes its tensor's sum NaN or Inf: one sum per tensor, read at once
    (reading a CPU value costs nothing) and added up in Python's double precision, where
    get_total_norm's grouping by device and dtype, or stacking the sums into one more tensor,
    cost twice as much at every step. Half-precision tensors are summed in float32 (their own
    sum would overflow long before their values do); wider ones in their own dtype, complex
    included.
    """
    total: complex = 0.0
    for g in grads:
        total += (g.sum(dtype=torch.float32) if g.element_size() < 4 else g.sum()).item()
    return cmath.isfinite(total)  # a complex total too: NaN or Inf in either part


class NonFiniteGuard(L.Callback):
    """Stops the run at the first non-finite training loss (any micro-batch) or gradient (any
    optimizer step), naming it.

    One process on the CPU: both are checked at once (reading a CPU value costs nothing), and a
    bad gradient is named down to the tensor. On a GPU, or with several ranks, reading a value
    would make the host wait for the device at every micro-batch; instead device-side flags
    record the first bad micro-batch and the first bad step, and are read

    * every `check_every_n_steps` optimizer steps (default `trainer.log_every_n_steps`: the steps
      at which the gradient-norm monitor reads its norms anyway), after the step's last
      micro-batch;
    * before every checkpoint is written (a NaN state is never saved) and at the end of every
      epoch;

    combined over ranks first (min), so every rank stops at the same step. The batch reported is
    still the first bad one; the run stops at most N optimizer steps after it.
    Gradients are not checked under fp16 loss scaling, where an Inf gradient is the scaler's
    normal way of skipping a step.
    """

    def __init__(
        self,
        check_grads: bool = True,
        check_every_n_steps: int | None = None,
        eager_on_cpu: bool = True,
    ) -> None:
        super().__init__()
        self.check_grads = check_grads
        self.check_every_n_steps = check_every_n_steps
        self.eager_on_cpu = eager_on_cpu  # false: the device-flag path on the CPU too (tests)
        self._flags: torch.Tensor | None = None  # [first bad micro-batch code, first bad step]
        self._params: list[torch.nn.Parameter] = []
        self._backward_loss: torch.Tensor | None = None
        # Per fit, decided at its first check: the device, the world and the precision plugin
        # do not change during a fit, and asking costs a few property chains at every step.
        self._eager: bool | None = None
        self._grads_checked: bool | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Listed once per fit (after configure_model has sharded or compiled the net):
        # `module.parameters()` walks every submodule, and hashing a torchmetrics Metric on the
        # way costs more than the check itself, at every optimizer step.
        self._params = list(pl_module.parameters())
        self._eager = self._grads_checked = None

    # -- recording ---------------------------------------------------------------------------
    def _immediate(self, trainer: L.Trainer, device: torch.device) -> bool:
        eager = self._eager
        if eager is None:
            eager = self.eager_on_cpu and cadence.host_reads_are_free(device)
            eager = eager and trainer.world_size == 1
            if self._params:  # in a fit (on_train_start ran): kept until the next one
                self._eager = eager
        return eager

    def _record(self, slot: int, ok: torch.Tensor, code: int) -> None:
        if self._flags is None:
            self._flags = torch.full((2,), _NONE, dtype=torch.long, device=ok.device)
        # Kernels only (python ints travel as kernel arguments): nothing here waits for the GPU.
        # Two of them: the code where `ok` is false (else "none"), and a running minimum.
        self._flags[slot].clamp_(max=torch.where(ok, _NONE, code))

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            if self._immediate(trainer, loss.device):
                if not _finite_value(loss):
                    raise self._loss_error(trainer.current_epoch, batch_idx)
            else:
                # isfinite needs no detach (its result has no gradient); `.all()` only when the
                # loss has more than one value: one kernel fewer per micro-batch on a GPU.
                ok = torch.isfinite(loss)
                ok = ok.reshape(()) if loss.numel() == 1 else ok.all()  # reshape: a view
                self._record(0, ok, (trainer.current_epoch << _BATCH_BITS) | batch_idx)
        if self._flags is not None and is_reading_step(
            trainer, batch_idx + 1, self.check_every_n_steps
        ):
            self.raise_if_seen(trainer)

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        self._backward_loss = loss  # a reference, read only if the step's gradients are bad

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        checked = self._grads_checked
        if checked is None:
            checked = self.check_grads and getattr(trainer.precision_plugin, "scaler", None) is None
            if self._params:  # in a fit: the plugin stays
                self._grads_checked = checked
        if not checked:
            return
        params = self._params or list(pl_module.parameters())  # called outside a fit (tests)
        grads = [_local(p.grad) for p in params if p.grad is not None]
        if not grads:
            return
        if not self._immediate(trainer, grads[0].device):
            total = torch.nn.utils.get_total_norm(grads)
            self._record(1, torch.isfinite(total), trainer.global_step)
            return
        if not _all_finite(grads):
            loss = self._backward_loss
            if loss is not None and not _finite_value(loss):
                # The step's own loss was NaN/Inf (its batch is the step's last): name that
                # cause; the loss check at on_train_batch_end would come after this one.
                raise self._loss_error(trainer.current_epoch, trainer.fit_loop.epoch_loop.batch_idx)
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

    # -- reading -------------------------------------------------------------------------------
    def raise_if_seen(self, trainer: L.Trainer) -> None:
        """Read the flags (a host sync; all ranks must call it together) and raise if set."""
        if self._flags is None:
            return
        flags = self._flags.clone()
        if trainer.world_size > 1:
            flags = trainer.strategy.reduce(flags, reduce_op="min")
        first_batch, first_step = flags.tolist()
        if first_batch < _NONE:
            epoch, batch = first_batch >> _BATCH_BITS, first_batch & (2**_BATCH_BITS - 1)
            raise self._loss_error(epoch, batch)
        if first_step < _NONE:
            raise NonFiniteLossError(
                f"non-finite gradient at optimizer step {first_step}; {DOCTOR_HINT}"
            )

    def _loss_error(self, epoch: int, batch: int) -> NonFiniteLossError:
        return NonFiniteLossError(
            f"non-finite training loss at epoch {epoch} batch {batch}: a NaN/Inf input, label or "
            f"overflow; {DOCTOR_HINT}"
        )

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.raise_if_seen(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Validation, then ModelCheckpoint: a NaN model is neither scored nor saved as `best`.
        if trainer.state.fn == TrainerFn.FITTING:
            self.raise_if_seen(trainer)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self.raise_if_seen(trainer)
