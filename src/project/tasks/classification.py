"""Image classification as a LightningModule: CrossEntropy on logits, accuracy, optimizer wiring."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from trainwell.blocks.checkpoint_loading import LoadsLikeLoadTrained
from trainwell.blocks.metrics import (
    BalancedAccuracy,
    EpochMetricHooks,
    EpochMetricLog,
    MacroF1,
    MicroAccuracy,
    WeightedMean,
    per_class_recall,
)
from trainwell.blocks.model_setup import shard_and_compile
from trainwell.blocks.optimization import (
    OptimizerFactory,
    SchedulerFactory,
    optimizer_and_schedule,
)
from trainwell.errors import TrainwellError
from trainwell.loading.labels import balanced_class_weights, class_counts, dataset_labels


class ClassificationTask(LoadsLikeLoadTrained, EpochMetricHooks, L.LightningModule):
    """Trains an injected `net` that returns raw logits.

    The optimizer and scheduler arrive as Hydra `_partial_`s; the scheduler factory is called with
    `total_steps` = optimizer steps of the whole run (Lightning's estimate; the template's plan
    fills in its own count), so it steps once per optimizer step, never per micro-batch (with
    accumulation that would end the schedule K times too early).

    training_step returns the plain micro-batch mean: the template's exact-accumulation callback
    turns any module's mean into the exact mean over each optimizer step's samples.
    """

    def __init__(
        self,
        net: nn.Module,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        num_classes: int = 10,
        label_smoothing: float = 0.0,
        compile: bool = False,
        loss: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        # Hydra hands the `loss` node over as a DictConfig: kept as plain data in hparams
        # (save_hyperparameters reads this local), the checkpoint needs no conversion.
        loss = dict(OmegaConf.to_container(loss)) if isinstance(loss, DictConfig) else loss
        # The net is a module (saved in state_dict) and the factories are code: neither belongs in
        # hparams, which are written to checkpoints loaded with weights_only=True.
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler"], logger=False)
        self.net = net
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.criterion = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        self._class_weights_rule = _class_weights_rule(
            (loss or {}).get("class_weights"), num_classes
        )
        if self._class_weights_rule is not None:
            # A buffer: saved in every checkpoint, so eval, export and a resumed run use the
            # weights computed on this run's training split, not a recount of other data.
            rule = self._class_weights_rule
            initial = torch.ones(num_classes) if isinstance(rule, str) else torch.tensor(rule)
            self.register_buffer("class_weights", initial.float())
        # Not MulticlassAccuracy on the training path: its argument checks read device values
        # (torch.unique, a GPU wait per step) and its per-class counting costs host time at every
        # step; the loss already fails on out-of-range labels (the doctor's targets.contract
        # names them). Validation and test keep the checked metric.
        self.train_acc = MicroAccuracy()
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.train_loss = WeightedMean()
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.val_acc_best = MaxMetric()
        # Validation and test only: what accuracy hides on imbalanced classes (a model that
        # always predicts a 90% class scores 0.9 accuracy, 1/C balanced accuracy).
        self.val_balanced_acc, self.test_balanced_acc = (
            BalancedAccuracy(num_classes),
            BalancedAccuracy(num_classes),
        )
        self.val_macro_f1, self.test_macro_f1 = MacroF1(num_classes), MacroF1(num_classes)
        self._epoch_log = EpochMetricLog()

    def _log_epoch(self, stage: str, prog_bar: bool = True) -> None:
        if self._epoch_log.take(stage):
            for kind in ("loss", "acc"):
                metric = getattr(self, f"{stage}_{kind}")
                self.log(f"{stage}/{kind}", metric, on_step=False, on_epoch=True, prog_bar=prog_bar)
            if stage != "train":
                for kind in ("balanced_acc", "macro_f1"):
                    metric = getattr(self, f"{stage}_{kind}")
                    self.log(f"{stage}/{kind}", metric, on_step=False, on_epoch=True)

    def setup(self, stage: str) -> None:
        if stage == "fit" and self._class_weights_rule == "balanced":
            counts = class_counts(_train_labels(self.trainer), self.hparams.num_classes)
            if len(counts) > self.hparams.num_classes:
                raise TrainwellError(
                    f"the training split has labels up to {len(counts) - 1}, but "
                    f"model.num_classes={self.hparams.num_classes}"
                )
            self.class_weights.copy_(balanced_class_weights(counts))

    def _training_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self._class_weights_rule is None:
            return self.criterion(logits, y)
        # sum(w_y * loss) / n, not CrossEntropyLoss(weight=...)'s / sum(w_y): a mean over
        # samples, so exact accumulation still gives one optimizer step the gradient of its
        # whole window, however the samples fall into micro-batches.
        per_sample = F.cross_entropy(
            logits, y, reduction="none", label_smoothing=self.hparams.label_smoothing
        )
        return (per_sample * self.class_weights[y]).mean()

    def configure_model(self) -> None:
        shard_and_compile(self, self.net, bool(self.hparams.compile))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _shared_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        x, y = batch
        logits = self(x)
        return self.criterion(logits, y), logits.argmax(dim=1), y

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss, preds = self._training_loss(logits, y), logits.argmax(dim=1)
        # update(), not __call__: calling a metric also computes a per-batch value we never log
        # (measured ~0.65 ms/step of pure overhead on the digits default). WeightedMean reads
        # the loss detached itself.
        self.train_loss.update(loss, y.numel())
        self.train_acc.update(preds, y)
        self._log_epoch("train")
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, preds, y = self._shared_step(batch)
        self.val_loss.update(loss, weight=y.numel())
        self.val_acc.update(preds, y)
        self.val_balanced_acc.update(preds, y)
        self.val_macro_f1.update(preds, y)
        self._log_epoch("val")

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        # update(), not __call__: a call also computes the value of this one update, which is
        # never read (the MaxMetric state is the same).
        self.val_acc_best.update(self.val_acc.compute())
        self.log("val/acc_best", self.val_acc_best.compute(), prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, preds, y = self._shared_step(batch)
        self.test_loss.update(loss, weight=y.numel())
        self.test_acc.update(preds, y)
        self.test_balanced_acc.update(preds, y)
        self.test_macro_f1.update(preds, y)
        self._log_epoch("test", prog_bar=False)

    def on_test_epoch_end(self) -> None:
        # Per-class recall for results.json (`test/recall/<class>`), from the counts summed over
        # ranks: the same value on every rank. Lightning resets the metric after this hook.
        with self.test_balanced_acc.sync_context():
            recalls = per_class_recall(self.test_balanced_acc.counts).tolist()
        for c, recall in enumerate(recalls):
            self.log(f"test/recall/{c}", float(recall))

    def configure_optimizers(self) -> Any:
        return optimizer_and_schedule(self.trainer, self.optimizer_factory, self.scheduler_factory)


def _class_weights_rule(value: Any, num_classes: int) -> str | list[float] | None:
    """model.loss.class_weights: null (plain mean), "balanced" (n / (C x n_c) from the training
    split) or one weight per class."""
    if value is None:
        return None
    if isinstance(value, str):
        if value != "balanced":
            raise TrainwellError(
                f"model.loss.class_weights={value!r}: use balanced, a list of {num_classes} "
                "weights, or null"
            )
        return value
    weights = [float(w) for w in value]
    if len(weights) != num_classes or min(weights) < 0 or not all(map(math.isfinite, weights)):
        raise TrainwellError(
            f"model.loss.class_weights needs {num_classes} finite non-negative weights, "
            f"got {weights}"
        )
    return weights


def _train_labels(trainer: L.Trainer) -> torch.Tensor:
    datamodule = getattr(trainer, "datamodule", None)
    dataset = getattr(datamodule, "train_set", None)
    if dataset is None and datamodule is not None:
        dataset = datamodule.train_dataloader().dataset
    if dataset is None:
        raise TrainwellError(
            "model.loss.class_weights=balanced counts the training split's classes: fit with a "
            "datamodule, or give the weights as a list"
        )
    return dataset_labels(dataset)
