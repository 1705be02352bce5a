"""Digits datamodules that keep what they fit as people keep it: numpy arrays and scalars in
`state_dict()` (saved and read back as numpy), or the fitted scikit-learn object itself (which no
weights-only checkpoint can hold, and which a run refuses before its first training step)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.preprocessing import StandardScaler
from torch.utils.data import TensorDataset

from tests.owned.data import OwnedDigits


class NumpyStatsDigits(OwnedDigits):
    """Per-pixel mean and std fitted on the train split, kept as numpy: float32 arrays, an
    np.float64 scalar, an np.int64 count and a tuple, as `scaler.mean_` and friends come."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stats: dict[str, Any] = {}

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if not self.stats:
            images, _ = self._load()
            train = images[self.splits["train"]].reshape(-1, 64)
            self.stats = {
                "mean": train.mean(axis=0),
                "std": train.std(axis=0) + np.float32(1e-3),
                "overall": np.float64(train.mean()),
                "count": np.int64(len(train)),
                "fitted_on": ("train", len(train)),
            }

    def _dataset(self, split: str) -> TensorDataset:
        images, labels = self._load()
        idx = self.splits[split]
        x = (images[idx].reshape(-1, 64) - self.stats["mean"]) / self.stats["std"]
        return TensorDataset(torch.from_numpy(x.reshape(-1, 8, 8)), torch.from_numpy(labels[idx]))

    def state_dict(self) -> dict[str, Any]:
        return dict(self.stats)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # What every reader must hand back: the numpy values as they were saved, not tensors or
        # tagged data (a datamodule written for numpy would misbehave on anything else).
        kinds = {k: type(v) for k, v in state_dict.items()}
        want = {"mean": np.ndarray, "std": np.ndarray, "overall": np.float64,
                "count": np.int64, "fitted_on": tuple}  # fmt: skip
        if kinds != want:
            raise TypeError(f"{type(self).__name__}.load_state_dict got {kinds}")
        self.stats = dict(state_dict)


class FittedScalerDigits(OwnedDigits):
    """Keeps the fitted StandardScaler itself in its state: only pickled code could save it."""

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        images, _ = self._load()
        self.scaler = StandardScaler().fit(images[self.splits["train"]].reshape(-1, 64))

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler} if hasattr(self, "scaler") else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scaler = state_dict["scaler"]
