"""scikit-learn's bundled diabetes set: a regression example that needs no download.

442 patients, 10 features (as `load_diabetes().data`: already centred and scaled), one target:
a measure of disease progression a year later (25-346). The loaders yield standardised targets,
with the mean and std of the training split kept as numpy (they travel in every checkpoint);
the task trains on them and its `predict_step` answers in the target's own units.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from torch.utils.data import TensorDataset

from project.data.base import SplitDataModule


class DiabetesDataModule(SplitDataModule):
    """Seeded train/val/test split; targets standardised with the train split's statistics."""

    def __init__(
        self, val_fraction: float = 0.15, test_fraction: float = 0.2, **loader_kwargs: Any
    ) -> None:
        super().__init__(**loader_kwargs)
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.target_mean: np.float64 | None = None
        self.target_std: np.float64 | None = None
        self.split_indices: dict[str, np.ndarray] = {}
        # Cross-validation (set_cv_fold): the fold's (train, val) indices replace the val split.
        self.cv_fold: tuple[np.ndarray, np.ndarray] | None = None

    @staticmethod
    def _load() -> tuple[np.ndarray, np.ndarray]:
        features, targets = load_diabetes(return_X_y=True)
        return features.astype(np.float32), targets.astype(np.float64)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        features, targets = self._load()
        rest, test = self._split_test(len(targets))
        if self.cv_fold is not None:
            train, val = self.cv_fold
        else:
            val_share = self.val_fraction / (1.0 - self.test_fraction)
            train, val = train_test_split(rest, test_size=val_share, random_state=self.seed)
        if self.target_mean is None or self.target_std is None:
            # The train split's only: a checkpoint's values (load_state_dict) win.
            self.target_mean = targets[train].mean()
            self.target_std = targets[train].std()

        def split(idx: np.ndarray) -> TensorDataset:
            y = (targets[idx] - self.target_mean) / self.target_std
            return TensorDataset(torch.from_numpy(features[idx]), torch.from_numpy(y).float())

        self.train_set, self.val_set, self.test_set = split(train), split(val), split(test)
        self.split_indices = {"train": train, "val": val, "test": test}

    def _split_test(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(train+val, test) indices: the test split is the same with or without CV."""
        return train_test_split(np.arange(n), test_size=self.test_fraction, random_state=self.seed)

    def cv_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Cross-validation hook: the train+val samples (indices into load_diabetes) and the
        quintile of each one's target, so that every fold spans the target's range (the folds
        are stratified by these groups; None would give plain shuffled folds)."""
        _, targets = self._load()
        rest = np.sort(self._split_test(len(targets))[0])
        edges = np.quantile(targets[rest], [0.2, 0.4, 0.6, 0.8])
        return rest, np.digitize(targets[rest], edges)

    def set_cv_fold(self, train: np.ndarray, val: np.ndarray) -> None:
        """Cross-validation hook: train on `train`, validate on `val`; the target statistics are
        then fitted on `train` only (setup), so no fold's scale sees its validation targets."""
        self.cv_fold = (np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64))
        self.train_set = self.val_set = self.test_set = None
        self.target_mean = self.target_std = None

    def state_dict(self) -> dict[str, Any]:
        """The target statistics: the task de-normalises with them, predict and export read them
        back from the checkpoint instead of fitting them again."""
        if self.target_mean is None or self.target_std is None:
            return {}
        return {"target_mean": self.target_mean, "target_std": self.target_std}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "target_mean" in state_dict and "target_std" in state_dict:
            self.target_mean = state_dict["target_mean"]
            self.target_std = state_dict["target_std"]

    def raw_form(self) -> dict[str, Any]:
        """Predict, export and the server take `load_diabetes().data` rows (float32, (N, 10));
        each split's targets in their own units (what predict_step answers in)."""
        features, targets = self._load()
        return {
            "input": {
                "dtype": "float32",
                "shape": [None, 10],
                "description": "10 features as sklearn.datasets.load_diabetes().data",
            },
            "splits": {
                name: (features[idx], idx, targets[idx]) for name, idx in self.split_indices.items()
            },
        }
