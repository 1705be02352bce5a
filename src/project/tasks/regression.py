"""Regression as a LightningModule: MSE on standardised targets, MAE in the target's own units.

The datamodule standardises the targets (`target_mean`, `target_std`, fitted on its training
split); the task copies them into buffers at fit, so they travel in every checkpoint, and its
`predict_step` answers in the target's units: what predict writes, export puts in the graph and
the server answers.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanAbsoluteError, MeanMetric, MinMetric

from trainwell.blocks.optimization import (
    OptimizerFactory,
    SchedulerFactory,
    optimizer_and_schedule,
)


class RegressionTask(L.LightningModule):
    """Trains an injected `net` that returns one standardised value per sample, (N, 1)."""

    # What the outputs mean, read by predict, export and serve (docs/shipping.md: Output kinds).
    output_kind = "values"
    output_names = ["progression"]

    def __init__(
        self,
        net: nn.Module,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler"], logger=False)
        self.net = net
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        # Buffers: saved with the weights, so eval, predict and export de-normalise with the
        # statistics this run trained with.
        self.register_buffer("target_mean", torch.tensor(0.0))
        self.register_buffer("target_std", torch.tensor(1.0))
        self.train_loss, self.val_loss, self.test_loss = MeanMetric(), MeanMetric(), MeanMetric()
        self.val_mae, self.test_mae = MeanAbsoluteError(), MeanAbsoluteError()
        self.val_mae_best = MinMetric()

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and getattr(datamodule, "target_std", None) is not None:
            self.target_mean.fill_(float(datamodule.target_mean))
            self.target_std.fill_(float(datamodule.target_std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def predict_step(self, batch: Any, batch_idx: int = 0) -> torch.Tensor:
        """Target units: (N, 1) progression values."""
        return self(batch[0]) * self.target_std + self.target_mean

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x).squeeze(-1), y)
        self.train_loss.update(loss.detach(), weight=y.numel())
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True)
        return loss

    def _evaluate(self, batch: Any, stage: str) -> None:
        x, y = batch
        out = self(x).squeeze(-1)
        getattr(self, f"{stage}_loss").update(F.mse_loss(out, y), weight=y.numel())
        # In the target's units: the figure a reader of the predictions file recomputes.
        scale, shift = self.target_std, self.target_mean
        getattr(self, f"{stage}_mae").update(out * scale + shift, y * scale + shift)
        for kind in ("loss", "mae"):
            metric = getattr(self, f"{stage}_{kind}")
            self.log(f"{stage}/{kind}", metric, on_step=False, on_epoch=True, prog_bar=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        self.val_mae_best.update(self.val_mae.compute())
        self.log("val/mae_best", self.val_mae_best.compute(), prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> Any:
        return optimizer_and_schedule(self.trainer, self.optimizer_factory, self.scheduler_factory)
