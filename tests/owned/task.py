"""A plain classification LightningModule and its net: what a user writes, nothing of trainwell."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification import MulticlassAccuracy


class OwnedNet(nn.Module):
    """Flatten -> Linear -> Tanh -> Dropout -> Linear: smooth (no ReLU kink flips under another
    summation order), so exact-equality tests compare weights, and with dropout for eval tests."""

    def __init__(self, num_classes: int = 10, hidden: int = 32, dropout: float = 0.0) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.Tanh())
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.body(x)))


class OwnedClassifier(L.LightningModule):
    """Cross-entropy on the net's logits; optimizer and scheduler arrive as `_partial_`s."""

    def __init__(
        self,
        net: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler"], logger=False)
        self.net = net
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.train_loss, self.val_loss, self.test_loss = MeanMetric(), MeanMetric(), MeanMetric()
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc_best = MaxMetric()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.train_loss.update(loss.detach(), weight=y.numel())
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True)
        return loss

    def _evaluate(self, batch: Any, stage: str) -> None:
        x, y = batch
        logits = self(x)
        getattr(self, f"{stage}_loss").update(F.cross_entropy(logits, y), weight=y.numel())
        getattr(self, f"{stage}_acc").update(logits.argmax(dim=1), y)
        for kind in ("loss", "acc"):
            metric = getattr(self, f"{stage}_{kind}")
            self.log(f"{stage}/{kind}", metric, on_step=False, on_epoch=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        self.val_acc_best(self.val_acc.compute())
        self.log("val/acc_best", self.val_acc_best.compute())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
