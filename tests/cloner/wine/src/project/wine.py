"""Wine cultivars from 13 chemical measurements: my first project on this template.

The data is scikit-learn's bundled wine set (178 samples, 3 cultivars). Features are standardised
with a StandardScaler fitted on the training split only; its statistics travel in checkpoints
through the datamodule's state_dict().
"""

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import MulticlassAccuracy


class Standardize(nn.Module):
    """(x - mean) / scale with the scaler's statistics, for the exported model."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("scale", torch.tensor(scale, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.scale


class WineDataModule(L.LightningDataModule):
    num_classes = 3

    def __init__(
        self,
        batch_size: int = 16,
        val_size: float = 0.2,
        test_size: float = 0.2,
        split_seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.scaler = StandardScaler()
        self.fitted = False
        self.fold = None

    def load(self):
        X, y = load_wine(return_X_y=True)
        return X.astype(np.float32), y

    def split(self, y):
        idx = np.arange(len(y))
        rest, test = train_test_split(
            idx, test_size=self.hparams.test_size, stratify=y, random_state=self.hparams.split_seed
        )
        return np.sort(rest), np.sort(test)

    def setup(self, stage=None):
        X, y = self.load()
        rest, test = self.split(y)
        if self.fold is not None:
            train, val = self.fold
        else:
            train, val = train_test_split(
                rest,
                test_size=self.hparams.val_size,
                stratify=y[rest],
                random_state=self.hparams.split_seed,
            )
            train, val = np.sort(train), np.sort(val)
        if not self.fitted:
            self.scaler.fit(X[train])
            self.fitted = True
        self.idx = {"train": train, "val": val, "test": test}
        self.datasets = {}
        for name, rows in self.idx.items():
            features = self.scaler.transform(X[rows]).astype(np.float32)
            self.datasets[name] = TensorDataset(
                torch.from_numpy(features), torch.from_numpy(y[rows])
            )

    def train_dataloader(self):
        return DataLoader(
            self.datasets["train"],
            batch_size=self.hparams.batch_size,
            shuffle=True,
            num_workers=self.hparams.num_workers,
        )

    def val_dataloader(self):
        return DataLoader(self.datasets["val"], batch_size=64)

    def test_dataloader(self):
        return DataLoader(self.datasets["test"], batch_size=64)

    # the fitted scaler travels in every checkpoint
    def state_dict(self):
        if not self.fitted:
            return {}
        return {
            "mean": self.scaler.mean_,
            "scale": self.scaler.scale_,
            "var": self.scaler.var_,
            "n_samples_seen": self.scaler.n_samples_seen_,
        }

    def load_state_dict(self, state_dict):
        self.scaler.mean_ = state_dict["mean"]
        self.scaler.scale_ = state_dict["scale"]
        self.scaler.var_ = state_dict["var"]
        self.scaler.n_samples_seen_ = state_dict["n_samples_seen"]
        self.scaler.n_features_in_ = len(state_dict["mean"])
        self.fitted = True

    # cross-validation (cv.folds=K)
    def cv_samples(self):
        _, y = self.load()
        rest, _ = self.split(y)
        return rest, y[rest]

    def set_cv_fold(self, train, val):
        self.fold = (np.asarray(train), np.asarray(val))
        self.scaler = StandardScaler()
        self.fitted = False

    # predict / export / serve take raw measurements
    def raw_form(self):
        X, y = self.load()
        names = load_wine().target_names
        return {
            "input": {
                "dtype": "float32",
                "shape": [None, 13],
                "description": "13 chemical measurements, as sklearn.datasets.load_wine().data",
            },
            "splits": {s: (X[i], i, y[i]) for s, i in self.idx.items() if s != "train"},
            "preprocess": Standardize(self.scaler.mean_, self.scaler.scale_),
            "classes": [str(n) for n in names],
        }


class WineClassifier(L.LightningModule):
    def __init__(
        self,
        hidden: int = 32,
        dropout: float = 0.1,
        lr: float = 0.01,
        step_size: int = 10,
        gamma: float = 0.5,
        num_classes: int = 3,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(
            nn.Linear(13, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )
        self.train_acc = MulticlassAccuracy(num_classes=num_classes)
        self.val_acc = MulticlassAccuracy(num_classes=num_classes)
        self.test_acc = MulticlassAccuracy(num_classes=num_classes)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train/loss", loss, on_step=False, on_epoch=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.val_acc(logits, y)
        self.log("val/loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val/acc", self.val_acc, prog_bar=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.test_acc(logits, y)
        self.log("test/loss", F.cross_entropy(logits, y))
        self.log("test/acc", self.test_acc)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(
            optimizer, step_size=self.hparams.step_size, gamma=self.hparams.gamma
        )
        return [optimizer], [scheduler]
