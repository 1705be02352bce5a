"""A tiny LightningModule with a BatchNorm layer, and short real fits, for the weight-averaging
tests (tests/callbacks/test_ema_average.py and the WeightAveraging entries of test_compat.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.trainers import quiet_trainer


class NormNet(L.LightningModule):
    """Linear -> BatchNorm -> Tanh -> Linear, plain SGD; logs val/loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.cross_entropy(self.net(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


class ConfiguredNormNet(NormNet):
    """The layers built in configure_model, as sharded and compiled modules do."""

    def __init__(self) -> None:
        L.LightningModule.__init__(self)
        self.net: nn.Module | None = None

    def configure_model(self) -> None:
        if self.net is None:
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2))


def points(n: int = 32) -> DataLoader:
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(n, 3, generator=g), torch.randint(0, 2, (n,), generator=g))
    return DataLoader(data, batch_size=8)


def fit(
    module: L.LightningModule, callback: L.Callback, steps: int = 4, **kwargs: Any
) -> L.Trainer:
    """`steps` optimizer steps (one epoch of 4 batches per 4 steps), no validation unless asked."""
    trainer = quiet_trainer(callbacks=[callback], max_steps=steps, **kwargs)
    val = points() if kwargs.get("limit_val_batches") else None
    trainer.fit(module, train_dataloaders=points(), val_dataloaders=val)
    return trainer


def saved(trainer: L.Trainer, path: Path) -> dict[str, Any]:
    trainer.save_checkpoint(path)
    return torch.load(path, map_location="cpu", weights_only=True)
