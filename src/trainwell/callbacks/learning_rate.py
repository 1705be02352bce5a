"""LearningRateLogger: each optimizer's learning rate(s) to the loggers at the logging cadence.

Lightning's LearningRateMonitor does the same but also copies every value into a new device tensor
for `trainer.callback_metrics` (a blocking host->device copy, at batch counts that ignore
accumulation), so on a GPU it stalls the step at logging time. Here the values stay Python floats
and are written at the steps where the template's other callbacks read device values anyway.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

from trainwell.callbacks.cadence import is_reading_step


class LearningRateLogger(L.Callback):
    """Logs `lr-<Optimizer>` (`/pg<i>` per param group when there are several) every
    `every_n_steps` optimizer steps (default: trainer.log_every_n_steps)."""

    def __init__(self, every_n_steps: int | None = None) -> None:
        super().__init__()
        self.every_n_steps = every_n_steps

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if not trainer.loggers or not is_reading_step(trainer, batch_idx + 1, self.every_n_steps):
            return
        stats: dict[str, float] = {}
        for i, optimizer in enumerate(trainer.optimizers):
            name = type(optimizer).__name__ + (f"-{i}" if len(trainer.optimizers) > 1 else "")
            groups = optimizer.param_groups
            for j, group in enumerate(groups):
                lr = group["lr"]
                key = f"lr-{name}" + (f"/pg{j + 1}" if len(groups) > 1 else "")
                stats[key] = float(lr.item() if isinstance(lr, torch.Tensor) else lr)
        for logger in trainer.loggers:
            logger.log_metrics(stats, step=trainer.global_step)
