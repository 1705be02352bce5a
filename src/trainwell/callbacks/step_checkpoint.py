"""checkpoints/step-*.ckpt: pre-emption insurance every N optimizer steps.

Never inside an accumulation window (a resume would restart the window with part of its gradient
lost), never at an epoch's last batch and never at a batch after which a validation is due:
Lightning would resume such a checkpoint past that validation (compat/checkpoints.py); the
end-of-epoch last.ckpt, or the next step checkpoint, follows it.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from trainwell import compat


class StepCheckpoint(ModelCheckpoint):
    """ModelCheckpoint(every_n_train_steps=N) that writes only right after an optimizer step
    (never inside an accumulation window, even when it skipped the step's own batch), never
    at an epoch's last batch and never right before a validation."""

    _stepped_at = -1

    def __init__(
        self,
        *args: Any,
        every_n_train_steps: int | None = None,
        train_time_interval: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            *args,
            every_n_train_steps=every_n_train_steps,
            train_time_interval=train_time_interval,
            **kwargs,
        )
        # Saves come only from the step count (no clock): every other step, ModelCheckpoint's own
        # per-batch checks would end in `return`, at a few microseconds per training step.
        self._save_every_steps = (every_n_train_steps or 0) if train_time_interval is None else None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._stepped_at = trainer.global_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        step = trainer.global_step
        stepped, self._stepped_at = step != self._stepped_at, step
        if not stepped or (
            self._save_every_steps is not None
            and (self._save_every_steps < 1 or step % self._save_every_steps)
        ):
            return
        if not (compat.at_epoch_last_batch(trainer) or compat.validation_follows(trainer)):
            super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
