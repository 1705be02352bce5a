"""The shared, healthy plumbing every reported case starts from: digits tuples and a small net."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    return x, torch.tensor(y, dtype=torch.long)


class Digits(L.LightningDataModule):
    """(image, label) tuples; the last 20% are validation."""

    def __init__(self, batch_size: int = 32, num_workers: int = 0) -> None:
        super().__init__()
        self.batch_size, self.num_workers = batch_size, num_workers
        self.train: Dataset | None = None

    def wrap(self, train: Dataset) -> Dataset:
        """What a case does to its training set (augmentation); the healthy default: nothing."""
        return train

    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        self.train = self.wrap(TensorDataset(x[:cut], y[:cut]))
        self.val = TensorDataset(x[cut:], y[cut:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=64)


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


class Classifier(L.LightningModule):
    """A small digits classifier with cross-entropy on logits and Adam."""

    lr = 1e-2

    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.lr)
