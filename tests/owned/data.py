"""A plain LightningDataModule over scikit-learn's bundled digits, read straight into tensors."""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SCALE = 16.0  # load_digits' pixels are 0..16


class ScaleDigits(nn.Module):
    """Raw digits (N, 8, 8), 0..16 -> the model's input: the loaders' own scaling, in a graph."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images / SCALE


class OwnedDigits(L.LightningDataModule):
    """1,797 8x8 digits, split by a seeded permutation: real, learnable, trains in a second.

    Takes the loader knobs every datamodule config inherits (conf/data/_loader.yaml); `sampler`
    and `samples_per_epoch` are read by the template's loader policy, not here.
    """

    num_classes = 10

    def __init__(
        self,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        sampler: str = "shuffle",
        samples_per_epoch: int | None = None,
        data_dir: str | None = None,
    ) -> None:
        super().__init__()
        # Where a datamodule written as lightning-hydra-template writes them reads its files
        # (`data_dir: ${paths.data_dir}`); the bundled digits need none.
        self.data_dir = data_dir
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.persistent_workers = persistent_workers and num_workers > 0
        self.drop_last = drop_last
        self.seed = seed
        self.sampler, self.samples_per_epoch = sampler, samples_per_epoch
        self.splits: dict[str, np.ndarray] = {}

    @staticmethod
    def _load() -> tuple[np.ndarray, np.ndarray]:
        images, labels = load_digits(return_X_y=True)
        return images.astype(np.float32).reshape(-1, 8, 8), labels.astype(np.int64)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        _, labels = self._load()
        order = np.random.default_rng(self.seed).permutation(len(labels))
        n_test = round(len(labels) * self.test_fraction)
        n_val = round(len(labels) * self.val_fraction)
        self.splits = {
            "test": np.sort(order[:n_test]),
            "val": np.sort(order[n_test : n_test + n_val]),
            "train": np.sort(order[n_test + n_val :]),
        }

    def cv_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Cross-validation hook (cv.folds=K): the train+val samples and their labels."""
        self.setup()
        _, labels = self._load()
        rest = np.sort(np.concatenate([self.splits["train"], self.splits["val"]]))
        return rest, labels[rest]

    def set_cv_fold(self, train: np.ndarray, val: np.ndarray) -> None:
        """Cross-validation hook: train on `train`, validate on `val` (nothing is fitted)."""
        self.setup()
        self.splits = {**self.splits, "train": np.sort(train), "val": np.sort(val)}

    def _dataset(self, split: str) -> TensorDataset:
        images, labels = self._load()
        idx = self.splits[split]
        return TensorDataset(torch.from_numpy(images[idx] / SCALE), torch.from_numpy(labels[idx]))

    def _loader(self, split: str, batch_size: int, train: bool) -> DataLoader:
        return DataLoader(
            self._dataset(split),
            batch_size=batch_size,
            shuffle=train,
            drop_last=self.drop_last and train,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            generator=torch.Generator().manual_seed(self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.batch_size, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.eval_batch_size, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_batch_size, train=False)

    def raw_form(self) -> dict[str, Any]:
        """Predict, export and serve take load_digits().images rows (float32, 0..16)."""
        images, labels = self._load()
        return {
            "input": {
                "dtype": "float32",
                "shape": [None, 8, 8],
                "range": [0.0, SCALE],
                "description": "8x8 grey digits as sklearn.datasets.load_digits().images",
            },
            "splits": {name: (images[i], i, labels[i]) for name, i in self.splits.items()},
            "preprocess": ScaleDigits(),
            "classes": [str(c) for c in range(self.num_classes)],
        }


class RowsToDigits(nn.Module):
    """Rows of up to 64 values (N, T), a digit's pixels in reading order shifted by `offset` and
    right-padded with zeros -> the loaders' (N, 8, 8) input."""

    def __init__(self, offset: float) -> None:
        super().__init__()
        self.offset = offset

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        pixels = (rows.to(torch.float32) - self.offset).clamp(min=0)
        pixels = nn.functional.pad(pixels, (0, 64 - pixels.shape[1]))
        return pixels.view(-1, 8, 8) / SCALE


class OwnedRows(OwnedDigits):
    """OwnedDigits whose raw samples are rows of any length up to 64: `raw="values"`, float32
    pixel values with no declared range; `raw="ids"`, byte ids (pixel + 1) right-padded with 0.
    The two input specs whose rules the server and predict once applied differently."""

    def __init__(self, raw: str = "values", top_id: int = 255, **loader: Any) -> None:
        super().__init__(**loader)
        self.raw, self.top_id = raw, top_id  # top_id: the declared range's top, for a mistake

    def raw_form(self) -> dict[str, Any]:
        images, labels = self._load()
        rows = images.reshape(-1, 64)
        spec: dict[str, Any] = {
            "shape": [None, None],
            "dynamic_axes": {"0": "batch", "1": "sequence"},
            "max_sequence": 64,
            "description": "a digit's pixels in reading order",
        }
        if self.raw == "ids":
            rows = (rows + 1).astype(np.uint8)
            spec.update(dtype="uint8", range=[0, self.top_id], pad=0)
        else:
            spec.update(dtype="float32")
        return {
            "input": spec,
            "splits": {name: (rows[i], i, labels[i]) for name, i in self.splits.items()},
            "preprocess": RowsToDigits(offset=1.0 if self.raw == "ids" else 0.0),
            "classes": [str(c) for c in range(self.num_classes)],
        }
