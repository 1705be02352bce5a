"""Causal language modelling as a LightningModule: token-level cross-entropy, exact by tokens.

The loss of a micro-batch is the mean over its *real* target tokens (padding ignored). Micro-
batches hold different numbers of real tokens, so the mean over a window is not the mean of the
micro-batch means: `loss_items` tells the template's exact accumulation how many tokens each
micro-batch's loss averages over, and every optimizer step then follows the mean over all the
tokens of its window (all ranks included). The logged losses are token-weighted means too, kept
as torchmetrics sums and counts, so they are exact across uneven batches and ranks.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric

from trainwell.blocks.checkpoint_loading import LoadsLikeLoadTrained
from trainwell.blocks.metrics import EpochMetricHooks, EpochMetricLog, WeightedMean
from trainwell.blocks.model_setup import shard_and_compile
from trainwell.blocks.optimization import (
    OptimizerFactory,
    SchedulerFactory,
    optimizer_and_schedule,
)

Batch = dict[str, torch.Tensor]


class Perplexity(MeanMetric):
    """exp(token-weighted mean loss): update it exactly like the loss MeanMetric."""

    def compute(self) -> torch.Tensor:
        return super().compute().exp()


class TrainingPerplexity(WeightedMean):
    """Perplexity on the training path: WeightedMean's update never waits for the GPU, where
    MeanMetric's NaN check reads the device at every micro-batch (the non-finite guard stops a
    NaN run instead)."""

    def compute(self) -> torch.Tensor:
        return super().compute().exp()


# Targets at padding: F.cross_entropy's default ignore_index, the value token datamodules pad
# targets with (data/sequences.py). A constant of its own, not an import of the datamodule: each
# example stands alone, so deleting one leaves the others working.
IGNORE_INDEX = -100


class LanguageModelTask(LoadsLikeLoadTrained, EpochMetricHooks, L.LightningModule):
    """Trains an injected `net` mapping tokens [B, T] to logits [B, T, V] on batches
    `{"tokens", "targets", ...}` whose padding targets are IGNORE_INDEX.

    Optimizer and scheduler arrive as Hydra `_partial_`s, as in ClassificationTask; the scheduler
    factory gets `total_steps` (optimizer steps) and steps once per optimizer step.
    """

    def __init__(
        self,
        net: nn.Module,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        # The net is a module (in state_dict) and the factories are code: not hparams, which go
        # into checkpoints that are loaded with weights_only=True.
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler"], logger=False)
        self.net = net
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.train_loss, self.train_ppl = WeightedMean(), TrainingPerplexity()
        for stage in ("val", "test"):
            setattr(self, f"{stage}_loss", MeanMetric())
            setattr(self, f"{stage}_ppl", Perplexity())
        self._epoch_log = EpochMetricLog()

    def configure_model(self) -> None:
        shard_and_compile(self, self.net, bool(self.hparams.compile))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.net(tokens)

    def loss_items(self, batch: Batch) -> torch.Tensor:
        """The real target tokens of a micro-batch: what training_step's loss averages over."""
        return (batch["targets"] != IGNORE_INDEX).sum()

    def _loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(batch["tokens"])
        targets = batch["targets"]
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX
        )
        return loss, (targets != IGNORE_INDEX).sum()

    def _track(self, stage: str, loss: torch.Tensor, tokens: torch.Tensor) -> None:
        # Weighted by tokens: the epoch value is sum(loss x tokens) / sum(tokens), over all
        # micro-batches and (synced by torchmetrics) all ranks.
        log = self._epoch_log.take(stage)
        for kind in ("loss", "ppl"):
            metric = getattr(self, f"{stage}_{kind}")
            metric.update(loss.detach(), tokens)
            if log:
                self.log(f"{stage}/{kind}", metric, on_step=False, on_epoch=True, prog_bar=True)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss, tokens = self._loss(batch)
        self._track("train", loss, tokens)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        loss, tokens = self._loss(batch)
        self._track("val", loss, tokens)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        loss, tokens = self._loss(batch)
        self._track("test", loss, tokens)

    def configure_optimizers(self) -> Any:
        return optimizer_and_schedule(self.trainer, self.optimizer_factory, self.scheduler_factory)
