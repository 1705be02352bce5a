"""checkpoints/step-*.ckpt: pre-emption insurance every N optimizer steps.

Never inside an accumulation window (a resume would restart the window with part of its gradient
lost) and never at an epoch's last batch: Lightning would resume such a checkpoint past the
epoch's validation (compat/checkpoints.py); the end-of-epoch last.ckpt follows that batch anyway.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from trainwell import compat


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
        if stepped and not compat.at_epoch_last_batch(trainer):
            super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
