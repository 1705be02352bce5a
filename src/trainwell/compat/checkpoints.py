"""Lightning's checkpoint callbacks and ModelParallelStrategy's checkpoint loading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

# ---------------------------------------------------------------------------------------------
# ModelCheckpoint(save_last=True) writes last.ckpt only when a top-k checkpoint was written at the
# same step (Lightning 2.6.0-2.6.6, model_checkpoint.py on_validation_end / on_train_epoch_end;
# reported downstream in openclimatefix/pvnet#542). With save_top_k=1 last.ckpt is then a copy of
# the *best* epoch, several epochs old. LastCheckpoint is a second, unmonitored checkpoint that
# overwrites last.ckpt after every epoch and once more when training ends.
# ---------------------------------------------------------------------------------------------


class LastCheckpoint(ModelCheckpoint):
    """`<dirpath>/last.ckpt`: always the newest end-of-epoch (or end-of-training) state."""

    def __init__(self, dirpath: str, filename: str = "last") -> None:
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            monitor=None,
            save_top_k=1,
            save_last=False,
            auto_insert_metric_name=False,
            enable_version_counter=False,
        )

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # max_steps can end training mid-epoch, after the last end-of-epoch save.
        if trainer.global_step != self._last_global_step_saved and not trainer.sanity_checking:
            self._save_none_monitor_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Resumed from a checkpoint of finished training (a kill landed after best.ckpt but
        # before last.ckpt reached the disk), FitLoop.run skips training and no train hook runs:
        # last.ckpt would keep an older state while results.json names it the final one.
        if trainer.global_step == self._last_global_step_saved or trainer.sanity_checking:
            return
        own_file = Path(self.dirpath or ".") / f"{self.filename}{self.FILE_EXTENSION}"
        resumed_from = trainer.ckpt_path
        if resumed_from and Path(resumed_from).resolve() == own_file.resolve():
            return  # last.ckpt already holds this state
        self._save_none_monitor_checkpoint(trainer, self._monitor_candidates(trainer))


# ---------------------------------------------------------------------------------------------
# A checkpoint written at the end of an epoch's last training batch, before that epoch's
# validation, resumes past the validation: on restart Lightning 2.6 counts an epoch whose last
# batch is done as finished (FitLoop.reset: restarted mid-epoch on the last batch -> processed
# and completed) and never validates it, so val metrics, the best checkpoint and early stopping
# miss an epoch. StepCheckpoint skips that batch; the end-of-epoch checkpoint follows it.
# ---------------------------------------------------------------------------------------------


def at_epoch_last_batch(trainer: L.Trainer) -> bool:
    return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)


class StepCheckpoint(ModelCheckpoint):
    """ModelCheckpoint(every_n_train_steps=N) that writes only right after an optimizer step
    (never inside an accumulation window, even when it skipped the step's own batch) and never
    at an epoch's last batch."""

    _stepped_at = -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._stepped_at = trainer.global_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        stepped = trainer.global_step != self._stepped_at
        self._stepped_at = trainer.global_step
        if stepped and not at_epoch_last_batch(trainer):
            super().on_train_batch_end(trainer, pl_module, *args, **kwargs)


# ---------------------------------------------------------------------------------------------
# ModelParallelStrategy (FSDP2) loading a full, non-sharded checkpoint re-keys each optimizer's
# state by looking at its first entry, and raises IndexError when the optimizer keeps no
# per-parameter state at all (plain SGD): `_rekey_optimizer_state_if_needed`, Lightning 2.6.6
# (no upstream report found; related: Lightning-AI/pytorch-lightning#21357). Testing the best
# checkpoint after an FSDP fit, or resuming one, then fails. Such optimizers have only their
# hyper-parameters to restore, which this does itself.
# ---------------------------------------------------------------------------------------------


def load_model_parallel_checkpoint(
    strategy: Any, path: Any, load: Any, weights_only: bool | None
) -> dict[str, Any]:
    """`load(path, weights_only)` is ModelParallelStrategy.load_checkpoint of `strategy`."""
    path = Path(strategy.broadcast(path))
    if not (path.is_file() and strategy.optimizers):
        return load(path, weights_only)
    saved = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
    states = saved.get("optimizer_states", [])
    if not states or any(s.get("state") for s in states):
        return load(path, weights_only)
    optimizers, strategy.optimizers = strategy.optimizers, []
    try:
        checkpoint = load(path, weights_only)
    finally:
        strategy.optimizers = optimizers
    for optimizer, state in zip(optimizers, states, strict=True):
        for group, saved_group in zip(optimizer.param_groups, state["param_groups"], strict=True):
            group.update({k: v for k, v in saved_group.items() if k != "params"})
    return checkpoint
