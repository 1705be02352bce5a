"""The example tasks hand each epoch metric to `self.log` once per epoch, not at every step.

What a user reads must not change: every epoch's logged values equal those of the same task
logging its Metric objects at every step (the way Lightning's docs show), epoch after epoch
(Lightning resets a logged Metric at its epoch end only if it was logged in that epoch).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from project.data.digits import DigitsDataModule
from project.tasks.classification import ClassificationTask
from tests.helpers.trainers import template_trainer, templated
from trainwell.blocks.metrics import EpochMetricLog

pytestmark = pytest.mark.example("project.data.digits", "project.tasks.classification")


class EveryStepClassification(ClassificationTask):
    """The reference: every step logs the Metric objects (Lightning's documented pattern)."""

    def _log_epoch(self, stage: str, prog_bar: bool = True) -> None:
        for kind in ("loss", "acc"):
            metric = getattr(self, f"{stage}_{kind}")
            self.log(f"{stage}/{kind}", metric, on_step=False, on_epoch=True, prog_bar=prog_bar)
        for kind in ("balanced_acc", "macro_f1") if stage != "train" else ():
            self.log(f"{stage}/{kind}", getattr(self, f"{stage}_{kind}"), on_epoch=True)


class EpochValues(L.Callback):
    """What the run had logged at the end of each epoch (its train and validation metrics)."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []

    def _take(self, trainer: L.Trainer) -> None:
        self.epochs.append({k: float(v) for k, v in trainer.callback_metrics.items()})

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch > 0:
            self._take(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._take(trainer)


def _fit(task: L.LightningModule, data: L.LightningDataModule, **kwargs: Any) -> list[dict]:
    values = EpochValues()
    trainer = template_trainer(
        max_epochs=3, precision="32-true", num_sanity_val_steps=2, callbacks=[values], **kwargs
    )
    trainer.fit(task, datamodule=templated(data, seed=0))
    return values.epochs


def _classification(cls: type[ClassificationTask]) -> ClassificationTask:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))
    return cls(net=net, optimizer=partial(torch.optim.SGD, lr=0.1))


def test_classification_epoch_values_equal_logging_at_every_step() -> None:
    def run(cls: type[ClassificationTask]) -> list[dict]:
        data = DigitsDataModule(batch_size=16, seed=0)
        return _fit(_classification(cls), data, limit_train_batches=7, limit_val_batches=3)

    once, every = run(ClassificationTask), run(EveryStepClassification)
    assert len(once) == 3
    keys = {"train/loss", "train/acc", "val/loss", "val/acc", "val/acc_best"}
    assert all(keys <= set(epoch) for epoch in once)
    assert once == every  # exact, epoch by epoch (the sanity check's values included nowhere)
    assert once[0]["train/loss"] != once[1]["train/loss"]  # the epochs really differ


def test_epoch_metric_log_is_due_once_per_started_epoch() -> None:
    due = EpochMetricLog()
    assert not due.take("train")  # outside an epoch (a direct training_step call): no log
    due.start("train")
    assert due.take("train") and not due.take("train")
    due.start("train")  # the next epoch, or the first step after a mid-epoch resume
    assert due.take("train") and not due.take("val")
