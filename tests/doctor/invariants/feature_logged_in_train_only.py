"""A tabular pipeline (scikit-learn's breast cancer table) that log-transforms the skewed
`mean area` column and then standardises every column with statistics fitted on train; the
log step sits in the training branch only, so validation's areas reach the scaler raw and land
hundreds of train spreads away.

Invariant: every split comes from the distribution it claims (data.split_distribution).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

AREA = list(load_breast_cancer().feature_names).index("mean area")


def log_area(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x[:, AREA] = np.log(x[:, AREA])
    return x


class Buggy(L.LightningDataModule):
    log_val = False

    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str | None = None) -> None:
        x, y = load_breast_cancer(return_X_y=True)
        x_train, x_val, y_train, y_val = train_test_split(
            x, y, test_size=0.2, random_state=0, stratify=y
        )
        x_train = log_area(x_train)
        if self.log_val:
            x_val = log_area(x_val)
        scaler = StandardScaler().fit(x_train)

        def tensors(x: np.ndarray, y: np.ndarray) -> TensorDataset:
            return TensorDataset(
                torch.tensor(scaler.transform(x), dtype=torch.float32), torch.tensor(y)
            )

        self.train, self.val = tensors(x_train, y_train), tensors(x_val, y_val)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=64)


class Healthy(Buggy):
    """The fix: the same log step for validation."""

    log_val = True


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(30, 32), nn.ReLU(), nn.Linear(32, 2))

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
        return torch.optim.Adam(self.parameters(), lr=1e-2)
