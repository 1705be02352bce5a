"""Exact gradient accumulation for any automatic-optimization LightningModule: count, then scale.

What Lightning does: it divides every micro-batch loss by K = accumulate_grad_batches, the short
tail window at the end of an epoch included, and DDP averages the ranks' gradients. A step is the
mean over its samples only when every window holds K equally sized micro-batches on every rank.
The tail window, an uneven last batch, uneven ranks and token-level losses (the number of real
tokens varies from micro-batch to micro-batch) all come out wrong, silently.

What `ExactAccumulation` does, without touching the module:

1. It counts the *items* of every micro-batch: its batch size by default, or what the module's
   `loss_items(batch)` returns when training_step's loss is a mean over something else (tokens,
   masked positions). A padding batch of a rank that ran out of data counts zero.
2. Before backward it scales the gradient of the micro-batch loss by count / reference, so a
   window accumulates the *sum* of per-item loss gradients (the fixed reference keeps gradient
   magnitudes where Lightning's are, which matters to fp16 loss scaling).
3. Before the optimizer step (after fp16 unscaling, before gradient clipping) it all-reduces the
   window's item count once and divides the gradients by it: the step follows the mean loss over
   every item the window held on all ranks.

Nothing is predicted from loader arithmetic, so any loader, sampler or batch structure works.
With K=1 on one process Lightning is already exact and the callback only checks declarations.

Declaring the count, in the module (no import from trainwell needed)::

    def loss_items(self, batch) -> torch.Tensor:
        return (batch["targets"] != PAD).sum()  # training_step's loss averages over these
"""

from __future__ import annotations

import numbers
from functools import partial
from typing import Any

import lightning as L
import torch
from torch.distributed.tensor import DTensor

from trainwell import compat
from trainwell.callbacks import cadence
from trainwell.errors import TrainwellError
from trainwell.loading.batch_size import batch_size

ITEMS_HOOK = "loss_items"


class ItemCountError(TrainwellError):
    """A module declared an item count that cannot normalise a loss."""


def counting_unit(module: L.LightningModule) -> str:
    """What one item is for this module: `samples`, or the module's own declaration."""
    if callable(getattr(module, ITEMS_HOOK, None)):
        return f"{type(module).__name__}.{ITEMS_HOOK}"
    return "samples"


def _bad_count(module: L.LightningModule, count: Any, batch_idx: int, why: str) -> ItemCountError:
    shown = count.item() if isinstance(count, torch.Tensor) and count.numel() == 1 else count
    return ItemCountError(
        f"{type(module).__name__}.{ITEMS_HOOK} returned {shown!r} for train micro-batch "
        f"{batch_idx} ({why}); it must return a positive integer: the number of items (tokens, "
        "masked positions) that training_step's loss averages over"
    )


def count_items(module: L.LightningModule, batch: Any, batch_idx: int = 0) -> int | torch.Tensor:
    """The number of items `batch` contributes to the module's loss, validated.

    A python int, or a 0-dim integer tensor on the batch's device: reading a CUDA count would
    stall the GPU every micro-batch, so its sign is checked later (`ExactAccumulation`).
    """
    if not callable(getattr(module, ITEMS_HOOK, None)):
        return batch_size(batch)
    count = getattr(module, ITEMS_HOOK)(batch)
    if isinstance(count, bool) or (isinstance(count, torch.Tensor) and count.dtype == torch.bool):
        raise _bad_count(module, count, batch_idx, "a bool, not a count")
    if isinstance(count, numbers.Integral):
        if count <= 0:
            raise _bad_count(module, count, batch_idx, "not positive")
        return int(count)
    if not isinstance(count, torch.Tensor):
        raise _bad_count(module, count, batch_idx, f"a {type(count).__name__}, not an integer")
    if count.numel() != 1:
        raise _bad_count(module, tuple(count.shape), batch_idx, "a tensor of that shape")
    if count.is_floating_point() or count.is_complex():
        raise _bad_count(module, count, batch_idx, f"dtype {count.dtype}, not an integer")
    if cadence.host_reads_are_free(count.device):
        value = int(count)
        if value <= 0:
            raise _bad_count(module, value, batch_idx, "not positive")
        return value
    return count.reshape(())


def _times(ratio: float | torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    if isinstance(ratio, torch.Tensor):
        ratio = ratio.to(dtype=grad.dtype)
    return grad * ratio


class ExactAccumulation(L.Callback):
    """Always installed by the template, first in the callback list (other callbacks' gradient
    hooks then see the final gradients). See the module docstring."""

    def __init__(self, check_every_n_steps: int | None = None) -> None:
        super().__init__()
        # None: trainer.log_every_n_steps, the steps at which the guards read device values too
        self.check_every_n_steps = check_every_n_steps
        self.reference: float | None = None
        self._active = False
        self._scaling = False
        self._counting = False
        self._count: int | torch.Tensor | None = None
        self._window: int | torch.Tensor = 0
        self._smallest: torch.Tensor | None = None  # device-side, for counts left on the GPU
        self._module_name = ""

    # -- fit set-up --------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._active = bool(pl_module.automatic_optimization)
        world = trainer.world_size
        self._scaling = self._active and (compat.lightning_loss_divisor(trainer) > 1 or world > 1)
        # Without scaling a count is only worth taking to check the module's declaration: with
        # none (items are samples) there is nothing to do per micro-batch.
        self._counting = self._scaling or (
            self._active and callable(getattr(pl_module, ITEMS_HOOK, None))
        )
        self._module_name = type(pl_module).__name__
        self._window, self._count, self._smallest = 0, None, None
        if world > 1 and self._active:
            unit = counting_unit(pl_module)
            first = trainer.strategy.broadcast(unit, src=0)
            if not trainer.strategy.reduce_boolean_decision(unit == first, all=True):
                raise ItemCountError(
                    f"{self._module_name} counts loss items as {unit!r} on rank "
                    f"{trainer.global_rank} but as {first!r} on rank 0; every rank must declare "
                    f"the same {ITEMS_HOOK}"
                )

    def state_dict(self) -> dict[str, Any]:
        self._raise_if_bad_count_seen()  # never checkpoint a run normalised by a bad count
        return {"reference": self.reference}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # The same reference as the uninterrupted run: gradients then round identically.
        self.reference = state_dict.get("reference")

    # -- per micro-batch ---------------------------------------------------------------------
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if not self._counting:
            return
        if trainer.world_size > 1 and _is_padding(trainer, batch_idx):
            count: int | torch.Tensor = 0  # a zero-weight copy: it counts no items
        else:
            count = count_items(pl_module, batch, batch_idx)
            if isinstance(count, torch.Tensor):
                smallest = count if self._smallest is None else torch.minimum(self._smallest, count)
                self._smallest = smallest
        if self.reference is None and self._scaling:
            # Identical on every rank: each rank's gradient is divided by it before DDP averages.
            # Every rank joins the broadcast, one whose first batch is a padding copy too (fewer
            # batches than ranks): skipping it would leave rank 0 waiting there for ever.
            first = float(count) if isinstance(count, int) else float(count.item())
            self.reference = float(trainer.strategy.broadcast(max(first, 1.0), src=0))
        self._count = count

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        count, self._count = self._count, None
        if not self._scaling or count is None:
            return
        self._window = self._window + count
        assert self.reference is not None
        ratio = count / self.reference
        if isinstance(ratio, float) and ratio == 1.0:
            return
        loss.register_hook(partial(_times, ratio))

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        if self._smallest is not None:  # else no count was left on the device to check
            every = self.check_every_n_steps or trainer.log_every_n_steps or 1
            if trainer.global_step % every == 0:
                self._raise_if_bad_count_seen()
        if not self._scaling:
            return
        total, self._window = self._window, 0
        world = trainer.world_size
        numerator = world * compat.lightning_loss_divisor(trainer) * (self.reference or 1.0)
        if world > 1:
            device = pl_module.device
            # One all-reduce per optimizer step, queued on the device: no host copy of the count
            # (torch.full, not as_tensor) and no barrier (Lightning's strategy.reduce adds one).
            if isinstance(total, torch.Tensor):
                reduced = total.to(dtype=torch.float64).reshape(())
            else:
                reduced = torch.full((), float(total), device=device, dtype=torch.float64)
            torch.distributed.all_reduce(reduced, op=torch.distributed.ReduceOp.SUM)
            factor: float | torch.Tensor = (numerator / reduced).float()
            if cadence.host_reads_are_free(device) and float(reduced) <= 0:
                raise ItemCountError(self._empty_window(trainer))
        elif isinstance(total, torch.Tensor):
            factor = (numerator / total.double()).float()
        else:
            if total <= 0:
                raise ItemCountError(self._empty_window(trainer))
            factor = numerator / total
            if factor == 1.0:
                return
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
        compat.mul_tensors_(local, factor)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._raise_if_bad_count_seen()

    # -- helpers -----------------------------------------------------------------------------
    def _empty_window(self, trainer: L.Trainer) -> str:
        return (
            f"the accumulation window ending at optimizer step {trainer.global_step} holds 0 "
            f"items on all ranks ({self._module_name}.{ITEMS_HOOK} or an empty split); a loss "
            "over zero items is undefined"
        )

    def _raise_if_bad_count_seen(self) -> None:
        if self._smallest is not None and int(self._smallest) <= 0:
            raise ItemCountError(
                f"{self._module_name}.{ITEMS_HOOK} returned {int(self._smallest)} for a train "
                "micro-batch; it must return a positive integer: the number of items (tokens, "
                "masked positions) that training_step's loss averages over"
            )


def _is_padding(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether this rank's micro-batch is a zero-weight copy (loading/sharding.py)."""
    loader = trainer.train_dataloader
    check = getattr(getattr(loader, "batch_sampler", None), "is_padding", None)
    return bool(check(batch_idx)) if callable(check) else False
