"""configure_optimizers for the example tasks: the configured `_partial_`s, stepped per step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch.optim import Optimizer

OptimizerFactory = Callable[..., Optimizer]
SchedulerFactory = Callable[..., torch.optim.lr_scheduler.LRScheduler]


def optimizer_and_schedule(
    trainer: L.Trainer, optimizer: OptimizerFactory, scheduler: SchedulerFactory | None
) -> Any:
    """The optimizer over the trained parameters and, if any, a schedule over the run's optimizer
    steps that steps once per optimizer step (never per micro-batch: with accumulation that would
    end the schedule K times too early). `total_steps` is Lightning's estimate; the template's
    plan fills in its own count when it built the factory."""
    # trainer.model: under FSDP2 the sharded parameters, which are the ones to optimise.
    built = optimizer(params=trainer.model.parameters())
    if scheduler is None:
        return built
    total_steps = int(trainer.estimated_stepping_batches)
    return {
        "optimizer": built,
        "lr_scheduler": {
            "scheduler": scheduler(optimizer=built, total_steps=total_steps),
            "interval": "step",
            "frequency": 1,
        },
    }
