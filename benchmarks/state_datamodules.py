"""Digits datamodules for benchmarks/state_checkpoint.py: the same statistics, fitted on the training
split, kept as Python lists and floats or as numpy arrays and scalars (as people keep them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from project.data.digits import DigitsDataModule


class _PixelStats(DigitsDataModule):
    """Digits that also fit a mean and std per pixel on the training split (the same work on
    both sides); `kept` turns them into what state_dict() returns."""

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if not hasattr(self, "pixel_mean"):
            images, _ = self._load()
            train = images[self.split_indices["train"]].reshape(-1, 64)
            self.pixel_mean, self.pixel_std = train.mean(axis=0), train.std(axis=0)
            self.count = np.int64(len(train))

    def kept(self, value: Any) -> Any:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if not state:
            return {}
        return {
            "mean": self.kept(np.float64(state["mean"])),
            "std": self.kept(np.float64(state["std"])),
            "pixel_mean": self.kept(self.pixel_mean),
            "pixel_std": self.kept(self.pixel_std),
            "count": self.kept(self.count),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.pixel_mean = np.asarray(state_dict["pixel_mean"], dtype=np.float32)
        self.pixel_std = np.asarray(state_dict["pixel_std"], dtype=np.float32)
        self.count = np.int64(state_dict["count"])


class ListStatsDigits(_PixelStats):
    def kept(self, value: Any) -> Any:
        return np.asarray(value).tolist()


class NumpyStatsDigits(_PixelStats):
    def kept(self, value: Any) -> Any:
        return value
