"""A run whose validation accuracy is scripted epoch by epoch: which checkpoint is best, and when,
is known in advance. Plain Lightning classes, driven through training.run.train in-process."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.config import QUIET_RUN, compose_config
from tests.helpers.state import load_checkpoint

# val/acc of each epoch: the best is epoch 1, and the metric only gets worse afterwards.
SCRIPTED_VAL_ACC = [0.5, 0.9, 0.7, 0.6]
STEPS_PER_EPOCH = 4  # 16 points, batch 4


class TrainOnly(L.LightningModule):
    """A plain module without validation_step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class ScriptedValAcc(TrainOnly):
    """A plain module whose validation accuracy follows SCRIPTED_VAL_ACC, epoch by epoch."""

    def validation_step(self, batch, batch_idx):
        epoch = min(self.current_epoch, len(SCRIPTED_VAL_ACC) - 1)
        self.log("val/acc", SCRIPTED_VAL_ACC[epoch])


class FourTrainPoints(L.LightningDataModule):
    """16 points in 4 training batches, no validation data."""

    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        self.data = TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,)))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=4)


class FourPoints(FourTrainPoints):
    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=8)


QUIET = [*QUIET_RUN, "test=false"]


def scripted_cfg(run_dir: Path, *overrides: str) -> DictConfig:
    cfg = compose_config([*QUIET, "trainer.max_epochs=4", *overrides], run_dir)
    with open_dict(cfg):
        cfg.model = OmegaConf.create({"_target_": f"{__name__}.ScriptedValAcc"})
        cfg.data = OmegaConf.create({"_target_": f"{__name__}.FourPoints"})
    return cfg


def step_of(path: Path) -> int:
    return int(load_checkpoint(path)["global_step"])


# val/mae of each epoch (monitored, mode min): the best is epoch 1, the last (epoch 3) is worse.
SCRIPTED_VAL_MAE = [5.0, 3.0, 4.0, 6.0]
SCRIPTED_VAL_RMSE = [7.0, 4.5, 5.5, 8.5]


class ScriptedValMae(TrainOnly):
    """A plain module whose val/mae and val/rmse follow the scripted lists, epoch by epoch."""

    def validation_step(self, batch, batch_idx):
        epoch = min(self.current_epoch, len(SCRIPTED_VAL_MAE) - 1)
        self.log("val/mae", SCRIPTED_VAL_MAE[epoch])
        self.log("val/rmse", SCRIPTED_VAL_RMSE[epoch])


def scripted_mae_cfg(run_dir: Path, *overrides: str) -> DictConfig:
    monitor = ["monitor.metric=val/mae", "monitor.mode=min"]
    cfg = compose_config([*QUIET, "trainer.max_epochs=4", *monitor, *overrides], run_dir)
    with open_dict(cfg):
        cfg.model = OmegaConf.create({"_target_": f"{__name__}.ScriptedValMae"})
        cfg.data = OmegaConf.create({"_target_": f"{__name__}.FourPoints"})
    return cfg
