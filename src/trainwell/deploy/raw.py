"""Raw samples, the form a user holds, and the eval-time preprocessing as a module in the graph.

digits: float32 (N, 8, 8), values 0-16, as `sklearn.datasets.load_digits().images`; the graph
normalises with the checkpoint's train-split mean and std and adds the channel axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from trainwell.data.digits import DigitsDataModule
from trainwell.errors import TrainwellError


class Normalize(nn.Module):
    """(x - mean) / std, then `shape` per sample: digits' eval-time preprocessing."""

    def __init__(self, mean: float, std: float, sample_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(float(mean), dtype=torch.float32))
        self.register_buffer("std", torch.tensor(float(std), dtype=torch.float32))
        self.sample_shape = tuple(sample_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.to(torch.float32) - self.mean) / self.std
        return x.reshape(x.shape[0], *self.sample_shape)


class RawModel(nn.Module):
    """preprocess -> the trained module's forward: what the exported graph computes."""

    def __init__(self, preprocess: nn.Module, model: nn.Module) -> None:
        super().__init__()
        self.preprocess = preprocess
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(self.preprocess(inputs))


@dataclass
class RawData:
    preprocess: nn.Module
    input_spec: dict[str, Any]
    classes: list[str] | None
    # split name -> (raw samples, dataset indices, targets)
    splits: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = field(
        default_factory=dict
    )


def raw_data(datamodule: Any) -> RawData:
    """The raw form of `datamodule`'s samples and the preprocessing that maps it to model inputs."""
    if isinstance(datamodule, DigitsDataModule):
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = digits.images.astype(np.float32)
        labels = digits.target.astype(np.int64)
        splits = {
            name: (images[idx], np.asarray(idx, dtype=np.int64), labels[idx])
            for name, idx in datamodule.split_indices.items()
        }
        return RawData(
            preprocess=Normalize(datamodule.mean, datamodule.std, (1, 8, 8)),
            input_spec={
                "name": "inputs",
                "dtype": "float32",
                "shape": [None, 8, 8],
                "dynamic_axes": {"0": "batch"},
                "range": [0.0, 16.0],
                "description": "8x8 grey digits as sklearn.datasets.load_digits().images",
            },
            classes=[str(i) for i in range(10)],
            splits=splits,
        )
    raise TrainwellError(
        f"{type(datamodule).__name__}: raw-sample prediction/export is not supported yet "
        "(supported: data=digits)"
    )
