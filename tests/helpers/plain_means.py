"""A plain LightningModule that logs plain tensors with on_epoch=True, the way of
docs/your-project.md's "Bring your own module": the epoch values are Lightning's running sums
(mean weighted by batch size, an explicit `batch_size=`, max, sum), which an exact resume has to
carry across a kill."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MeanMetric

from tests.helpers.config import QUIET_RUN, compose_config

# 22 points, batch 4: 6 batches per epoch, the last of 2 (the mean must weigh it by 2, not 4).
POINTS = 22
BATCH = 4
BATCHES_PER_EPOCH = 6
# val/acc of each epoch: epoch 0 is the best, so best.ckpt keeps epoch 0's end-of-epoch state.
VAL_ACC = [0.9, 0.5, 0.4]


class PlainMeans(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.metric_loss = MeanMetric()  # a torchmetrics Metric beside the plain tensors

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        # no `.item()`: a plain (device) tensor, averaged by Lightning over the epoch
        self.log("train/loss", loss, on_step=True, on_epoch=True)
        self.log("train/loss_max", loss.detach(), on_step=False, on_epoch=True, reduce_fx="max")
        self.log("train/loss_sum", loss.detach(), on_step=False, on_epoch=True, reduce_fx="sum")
        positives = int(y.sum()) + 1
        self.log("train/weighted", loss.detach(), on_epoch=True, batch_size=positives)
        # under DDP: the mean over both ranks' running sums (one process: no sync)
        self.log("train/loss_synced", loss.detach(), on_step=False, on_epoch=True, sync_dist=True)
        self.metric_loss(loss.detach())
        self.log("train/metric_loss", self.metric_loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        epoch = min(self.current_epoch, len(VAL_ACC) - 1)
        self.log("val/acc", VAL_ACC[epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Points(L.LightningDataModule):
    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(POINTS, 4, generator=g)
        y = torch.randint(0, 2, (POINTS,), generator=g)
        self.data = TensorDataset(x, y)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=BATCH, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=8)


QUIET = [*QUIET_RUN, "test=false", "seed=3", "trainer.deterministic=true"]


def plain_means_cfg(run_dir: Path, *overrides: str) -> DictConfig:
    cfg = compose_config([*QUIET, *overrides], run_dir)
    with open_dict(cfg):
        cfg.model = OmegaConf.create({"_target_": f"{__name__}.PlainMeans"})
        cfg.data = OmegaConf.create({"_target_": f"{__name__}.Points"})
    return cfg


# The same run through scripts/train.py (DDP re-executes the script, so not in-process).
PLAIN_MEANS_CLI = (
    *QUIET,
    # Whole groups swapped, as plain_means_cfg does: the classification config's keys (its
    # num_classes reads the data group) have no meaning for a plain module.
    "~model",
    f"+model._target_={__name__}.PlainMeans",
    "~data",
    f"+data._target_={__name__}.Points",
)
