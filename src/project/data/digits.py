"""scikit-learn's bundled handwritten digits: real data that needs no download (the default)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import TensorDataset

from project.data.base import ClassificationDataModule
from trainwell.blocks.preprocess import Normalize
from trainwell.errors import TrainwellError


class DigitsDataModule(ClassificationDataModule):
    """1,797 8x8 grey digits, split train/val/test with stratification and a seed.

    Normalisation statistics come from the train split only: computing them on all samples would
    leak the test distribution into training.
    """

    num_classes = 10

    def __init__(
        self,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        rare_classes: list[int] | None = None,
        rare_fraction: float = 1.0,
        **loader_kwargs,
    ) -> None:
        super().__init__(**loader_kwargs)
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        # An imbalanced training split: these classes keep `rare_fraction` of their training
        # samples (seeded); validation and test stay balanced, so they measure every class.
        self.rare_classes = list(rare_classes or [])
        self.rare_fraction = rare_fraction
        self.mean: float | None = None
        self.std: float | None = None
        # Cross-validation (set_cv_fold): the fold's (train, val) indices replace the val split.
        self.cv_fold: tuple[np.ndarray, np.ndarray] | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        images, labels = self._load()
        rest, test = self._split_test(labels)
        if self.cv_fold is not None:
            train, val = self.cv_fold
        else:
            val_share = self.val_fraction / (1.0 - self.test_fraction)
            train, val = train_test_split(
                rest, test_size=val_share, stratify=labels[rest], random_state=self.seed
            )
        train = self._cut_rare(train, labels)
        if self.mean is None or self.std is None:
            # Fitted on the train split only; a checkpoint's values (load_state_dict) win.
            self.mean = float(images[train].mean())
            self.std = float(images[train].std())

        def split(idx: np.ndarray) -> TensorDataset:
            x = torch.from_numpy((images[idx] - self.mean) / self.std)
            return TensorDataset(x, torch.from_numpy(labels[idx]))

        self.train_set, self.val_set, self.test_set = split(train), split(val), split(test)
        self.split_indices = {"train": train, "val": val, "test": test}

    @staticmethod
    def _load() -> tuple[np.ndarray, np.ndarray]:
        images, labels = load_digits(return_X_y=True)
        return images.astype(np.float32).reshape(-1, 1, 8, 8), labels.astype(np.int64)

    def _split_test(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(train+val, test) indices: the test split is the same with or without CV."""
        return train_test_split(
            np.arange(len(labels)),
            test_size=self.test_fraction,
            stratify=labels,
            random_state=self.seed,
        )

    def cv_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Cross-validation hook: the train+val samples (indices into load_digits) and labels."""
        _, labels = self._load()
        rest = np.sort(self._split_test(labels)[0])
        return rest, labels[rest]

    def set_cv_fold(self, train: np.ndarray, val: np.ndarray) -> None:
        """Cross-validation hook: train on `train`, validate on `val`; mean and std are then
        fitted on `train` only (setup), so no fold's statistics see its validation samples."""
        self.cv_fold = (np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64))
        self.train_set = self.val_set = self.test_set = None
        self.mean = self.std = None

    def _cut_rare(self, train: np.ndarray, labels: np.ndarray) -> np.ndarray:
        if not self.rare_classes:
            return train
        if not 0.0 < self.rare_fraction <= 1.0:
            raise TrainwellError(f"data.rare_fraction must be in (0, 1], got {self.rare_fraction}")
        rng = np.random.default_rng(self.seed)
        drop = []
        for c in self.rare_classes:
            members = train[labels[train] == c]
            keep = max(1, round(len(members) * self.rare_fraction))
            drop.append(rng.permutation(members)[keep:])
        return train[~np.isin(train, np.concatenate(drop))]

    def state_dict(self) -> dict[str, Any]:
        """The fitted normalisation: Lightning writes it into every checkpoint, so prediction and
        export read it back instead of fitting it again."""
        if self.mean is None or self.std is None:
            return {}
        return {"mean": self.mean, "std": self.std}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "mean" in state_dict and "std" in state_dict:
            self.mean, self.std = float(state_dict["mean"]), float(state_dict["std"])

    def raw_form(self) -> dict[str, Any]:
        """What predict, export and the server take: float32 (N, 8, 8), values 0-16, as
        `sklearn.datasets.load_digits().images`; the graph normalises with this checkpoint's
        train-split mean and std and adds the channel axis."""
        images, labels = self._load()
        images = images.reshape(-1, 8, 8)
        return {
            "input": {
                "dtype": "float32",
                "shape": [None, 8, 8],
                "range": [0.0, 16.0],
                "description": "8x8 grey digits as sklearn.datasets.load_digits().images",
            },
            "splits": {
                name: (images[idx], idx, labels[idx]) for name, idx in self.split_indices.items()
            },
            "preprocess": Normalize(self.mean, self.std, (1, 8, 8)),
            "classes": [str(i) for i in range(self.num_classes)],
        }
