"""Lightning's training loop: the accumulation divisor, the resumed epoch's loader order, the
per-batch SIGTERM broadcast; and torch's in-place multiply of a tensor list."""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
from lightning.fabric.utilities.data import _set_sampler_epoch

# ---------------------------------------------------------------------------------------------
# Lightning divides every micro-batch loss by accumulate_grad_batches, the short tail window of
# an epoch included (Lightning-AI/pytorch-lightning#19987, open; seen in 2.0-2.6.6). The exact
# accumulation callback undoes exactly this divisor; if upstream starts dividing the tail by its
# own length, this function must change with it (tests/test_compat.py watches the behaviour).
# ---------------------------------------------------------------------------------------------


def lightning_loss_divisor(trainer: L.Trainer) -> int:
    """What Lightning divided the loss of the current micro-batch by before backward."""
    return int(trainer.accumulate_grad_batches)


# ---------------------------------------------------------------------------------------------
# On a restart, FitLoop.setup_data builds the train iterator *before* the sampler's epoch is set
# (Lightning-AI/pytorch-lightning#21938, open; 2.5.3-2.6.6), so a resumed epoch is drawn in the
# order of epoch 0 whenever the loader fixes its order when the iterator is created (worker
# processes, or the template's sharded batch sampler), and a dataset whose augmentation follows
# the epoch (loading/per_sample.py) is told epoch 0. The same holds for a checkpoint written at the
# end of an epoch (last.ckpt), which Lightning does not count as a restart at all.
# ---------------------------------------------------------------------------------------------


def restore_train_loader_position(trainer: L.Trainer) -> None:
    """Rebuild a resumed run's train iterator after setting its sampler epoch (and after the
    saved loader position, when Lightning left it pending, has been applied)."""
    fit_loop = trainer.fit_loop
    epoch = fit_loop.epoch_progress.current.processed
    resumed = fit_loop.restarting or epoch > 0  # a fresh run's iterator is already epoch 0's
    if fit_loop._combined_loader is None or not resumed:
        return
    if fit_loop._combined_loader_states_to_load:
        fit_loop._load_combined_loader_states()
    consumed = fit_loop.epoch_loop.batch_progress.current.ready
    for loader in fit_loop._combined_loader.flattened:
        # Before iter(): with workers the sampler is consumed when the iterator is built.
        set_sampler_epoch(loader, epoch)
        resume_at = getattr(loader, "resume_at", None)
        if callable(resume_at):  # a restartable stream (loading/resumable.py) starts where it left
            resume_at(epoch, consumed)
    iter(fit_loop._data_fetcher)


def set_sampler_epoch(loader: object, epoch: int) -> None:
    """Lightning's own per-epoch `set_epoch` call on a loader's samplers."""
    _set_sampler_epoch(loader, epoch)


# ---------------------------------------------------------------------------------------------
# torch has no public "multiply a list of tensors in place"; the fused foreach kernel is one
# launch for all gradients instead of one per tensor (the accumulation scale runs every step).
# ---------------------------------------------------------------------------------------------


def mul_tensors_(tensors: Sequence[torch.Tensor], factor: float | torch.Tensor) -> None:
    if tensors:
        torch._foreach_mul_(list(tensors), factor)


# ---------------------------------------------------------------------------------------------
# Under DDP Lightning 2.6 broadcasts a "received SIGTERM" flag from rank 0 before *every*
# training batch and reads it on the host (`_TrainingEpochLoop._broadcast_sigterm_tensor`):
# one collective and one host sync per micro-batch (Lightning-AI/pytorch-lightning#21487; fix
# proposed in #21640). The template's PreemptionCheckpoint owns SIGTERM (Lightning's flag is never
# set) and agrees on pre-emption every N steps instead, so the per-batch broadcast is skipped.
# ---------------------------------------------------------------------------------------------


def skip_per_batch_sigterm_broadcast(trainer: L.Trainer) -> None:
    trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor = lambda: None  # type: ignore[method-assign]
