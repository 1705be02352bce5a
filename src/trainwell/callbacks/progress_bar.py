"""ThrottledProgressBar that redraws the training bar at most `refresh_rate` times per second.

Lightning's bar updates its task and re-reads every progress-bar metric at every training batch,
although the screen is redrawn only `refresh_rate` times per second: on a fast step (small model,
fast GPU) that per-batch Python is a large share of the host's time between kernels.

Epochs are counted from 1, as `trainer.max_epochs`, the plan and the run's closing line count
them: Lightning's bar says "Epoch 15/19" for the epoch that line calls "epoch 16 of 20".
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar as _LightningRichProgressBar


class ThrottledProgressBar(_LightningRichProgressBar):
    """Lightning's RichProgressBar; the training bar and its metrics are updated at most every
    1 / `refresh_rate` seconds, and always at an epoch's last batch, before validation and at the
    end of training (the bar never stays behind where the run stopped)."""

    def __init__(self, refresh_rate: int = 10, **kwargs: Any) -> None:
        super().__init__(refresh_rate=refresh_rate, **kwargs)
        self._next_draw = 0.0
        self._pending: tuple[L.Trainer, L.LightningModule, int] | None = None
        self._described: tuple[Any, int] | None = None  # (bar task, epoch) last described

    def _describe(self, trainer: L.Trainer) -> None:
        """Name the training bar's epoch from 1 (once per task and epoch: Lightning recreates the
        task on a mid-epoch resume, with its own 0-based text)."""
        task = self.train_progress_bar_id
        if (
            self.progress is None
            or task is None
            or self._described == (task, trainer.current_epoch)
        ):
            return
        self._described = (task, trainer.current_epoch)
        text = f"Epoch {trainer.current_epoch + 1}"
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            text += f"/{trainer.max_epochs}"
        text = f"{text:{len(self.validation_description)}}"  # as wide as "Validation": no flicker
        style = self.theme.description
        self.progress.update(task, description=f"[{style}]{text}" if style else text)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._describe(trainer)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        now = time.monotonic()
        if now < self._next_draw and batch_idx + 1 < trainer.num_training_batches:
            self._pending = (trainer, pl_module, batch_idx)
            return
        self._pending = None
        self._next_draw = now + 1.0 / max(self.refresh_rate, 1)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._describe(trainer)

    def _flush(self) -> None:
        # The last skipped update (a run stopped by max_steps mid-epoch, or validation every N
        # batches): drawn before the bar is read or closed.
        if self._pending is not None:
            trainer, pl_module, batch_idx = self._pending
            self._pending = None
            super().on_train_batch_end(trainer, pl_module, None, None, batch_idx)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._flush()
        super().on_validation_start(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._flush()
        super().on_train_epoch_end(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._flush()
        super().on_train_end(trainer, pl_module)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._pending = None  # the run failed: its last counts are not worth a redraw
        super().on_exception(trainer, pl_module, exception)
