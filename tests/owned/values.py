"""A plain regression datamodule and module, as a user writes them, nothing of trainwell:
scikit-learn's bundled diabetes data (442 samples, 10 features, offline), targets standardised
with the training part's statistics, de-normalised in the module's predict_step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_diabetes
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class OwnedDiabetes(L.LightningDataModule):
    """Targets of shape (N, 1) (`column=True`) or (N,), standardised by the training part's mean
    and std (its state_dict: they travel in the checkpoints)."""

    def __init__(
        self,
        batch_size: int = 32,
        column: bool = True,
        seed: int = 0,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        drop_last: bool = False,
        eval_batch_size: int | None = None,
        sampler: str = "shuffle",
        samples_per_epoch: int | None = None,
        data_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.batch_size, self.column, self.seed = batch_size, column, seed
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers, self.drop_last = num_workers, drop_last
        self.sampler, self.samples_per_epoch = sampler, samples_per_epoch
        self.splits: dict[str, np.ndarray] = {}
        self.mean: float | None = None
        self.std: float | None = None

    @staticmethod
    def _load() -> tuple[np.ndarray, np.ndarray]:
        x, y = load_diabetes(return_X_y=True)
        return x.astype(np.float32), y.astype(np.float32)

    def _split(self) -> None:
        if self.splits:
            return
        order = np.random.default_rng(self.seed).permutation(len(self._load()[1]))
        self.splits = {
            "test": np.sort(order[:88]),
            "val": np.sort(order[88:132]),
            "train": np.sort(order[132:]),
        }

    def setup(self, stage: str | None = None) -> None:
        self._split()
        if self.mean is None:
            y = self._load()[1][self.splits["train"]]
            self.mean, self.std = float(y.mean()), float(y.std())

    def cv_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Cross-validation hook: the train+val samples and their (float) targets."""
        self._split()
        rest = np.sort(np.concatenate([self.splits["train"], self.splits["val"]]))
        return rest, self._load()[1][rest]

    def set_cv_fold(self, train: np.ndarray, val: np.ndarray) -> None:
        self._split()
        self.splits = {**self.splits, "train": np.sort(train), "val": np.sort(val)}

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.mean, self.std = state_dict["mean"], state_dict["std"]

    def targets(self, split: str) -> torch.Tensor:
        """The split's standardised targets, as the loaders yield them."""
        self.setup()
        y = (self._load()[1][self.splits[split]] - self.mean) / self.std
        y = torch.from_numpy(y.astype(np.float32))
        return y[:, None] if self.column else y

    def _loader(self, split: str, train: bool) -> DataLoader:
        x = torch.from_numpy(self._load()[0][self.splits[split]])
        return DataLoader(
            TensorDataset(x, self.targets(split)),
            batch_size=self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            drop_last=self.drop_last and train,
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)


class OwnedDiabetesRaw(OwnedDiabetes):
    """The same data with a raw form (the hook predict.py and export read): the raw features and
    the targets in their own units, before standardising."""

    def raw_form(self) -> dict[str, Any]:
        self.setup()
        x, y = self._load()
        y = y[:, None] if self.column else y
        return {
            "input": {"dtype": "float32", "shape": [None, 10], "description": "10 features"},
            "splits": {name: (x[i], i, y[i]) for name, i in self.splits.items()},
        }


class OwnedRegressor(L.LightningModule):
    """An MLP on MSE; logs val/mae (in target units) and val/loss; predict_step answers in
    target units, where forward answers in standardised ones."""

    output_kind = "values"  # what predict, export, serve and cross-validation's rows read

    def __init__(
        self,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        hidden: int = 16,
        target_mean: float = 152.0,
        target_std: float = 77.0,
        column: bool = True,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "scheduler"], logger=False)
        self.net = nn.Sequential(nn.Linear(10, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.target_mean, self.target_std, self.column = target_mean, target_std, column

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net(x * 20.0)  # the features are ~0.05 wide
        return out if self.column else out[:, 0]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train/loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        pred = self(x)
        self.log("val/loss", F.mse_loss(pred, y), on_epoch=True)
        self.log("val/mae", (pred - y).abs().mean() * self.target_std, on_epoch=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test/mae", (self(x) - y).abs().mean() * self.target_std)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        x = batch[0] if isinstance(batch, list | tuple) else batch
        return self(x) * self.target_std + self.target_mean

    def configure_optimizers(self) -> Any:
        return self.optimizer_factory(self.parameters())
