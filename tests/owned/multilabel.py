"""A plain multi-label LightningModule and datamodule (scikit-learn's
make_multilabel_classification, seeded): what a user writes, nothing of trainwell. The module
declares its outputs as independent label scores; predict, export and serve read them so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import make_multilabel_classification
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

LABELS = ["red", "green", "blue", "grey", "gold"]
FEATURES = 12


class OwnedLabels(L.LightningDataModule):
    """400 samples of 12 count features, 5 labels each on or off; seeded splits."""

    def __init__(self, batch_size: int = 32, seed: int = 0, **_: Any) -> None:
        super().__init__()
        self.batch_size, self.seed = batch_size, seed
        self.splits: dict[str, np.ndarray] = {}

    @staticmethod
    def _load() -> tuple[np.ndarray, np.ndarray]:
        x, y = make_multilabel_classification(
            n_samples=400, n_features=FEATURES, n_classes=len(LABELS), random_state=0
        )
        return x.astype(np.float32), y.astype(np.int64)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        order = np.random.default_rng(self.seed).permutation(400)
        self.splits = {"test": order[:80], "val": order[80:140], "train": order[140:]}

    def cv_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Cross-validation hook: the train+val samples and their label vectors (N, 5)."""
        self.setup()
        rest = np.sort(np.concatenate([self.splits["train"], self.splits["val"]]))
        return rest, self._load()[1][rest]

    def set_cv_fold(self, train: np.ndarray, val: np.ndarray) -> None:
        self.setup()
        self.splits = {**self.splits, "train": np.sort(train), "val": np.sort(val)}

    def _loader(self, split: str, train: bool = False) -> DataLoader:
        x, y = self._load()
        idx = self.splits[split]
        data = TensorDataset(torch.from_numpy(x[idx] / 10), torch.from_numpy(y[idx]).float())
        return DataLoader(
            data,
            batch_size=self.batch_size,
            shuffle=train,
            generator=torch.Generator().manual_seed(self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def raw_form(self) -> dict[str, Any]:
        """Raw samples: the generator's counts (the graph divides by 10, as the loaders do)."""
        x, y = self._load()
        return {
            "input": {
                "dtype": "float32",
                "shape": [None, FEATURES],
                "description": "12 counts as make_multilabel_classification(random_state=0)",
            },
            "splits": {name: (x[i], i, y[i]) for name, i in self.splits.items()},
            "preprocess": Tenth(),
        }


class Tenth(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / 10


class OwnedMultiLabel(L.LightningModule):
    """BCE-with-logits over 5 labels; forward returns the label scores."""

    output_kind = "label_scores"
    output_names = LABELS

    def __init__(self, optimizer: Callable[..., torch.optim.Optimizer], hidden: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer"], logger=False)
        self.net = nn.Sequential(
            nn.Linear(FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, len(LABELS))
        )
        self.optimizer_factory = optimizer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.binary_cross_entropy_with_logits(self(x), y)
        self.log("train/loss", loss, on_step=False, on_epoch=True)
        return loss

    def _evaluate(self, batch: Any, stage: str) -> None:
        x, y = batch
        scores = self(x)
        self.log(f"{stage}/loss", F.binary_cross_entropy_with_logits(scores, y), sync_dist=True)
        right = ((scores >= 0).float() == y).float().mean()
        self.log(f"{stage}/label_acc", right, sync_dist=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> Any:
        return self.optimizer_factory(self.parameters())
