"""Eval-time preprocessing as modules, so an exported graph takes the samples a user holds.

A datamodule's `raw_form()` returns one of these (or its own nn.Module) as "preprocess": the graph
computes preprocess -> the trained module's forward, and export checks that it answers as
evaluation did.
"""

from __future__ import annotations

import torch
from torch import nn


class Normalize(nn.Module):
    """(x - mean) / std with one scalar mean and std, then reshaped to `sample_shape` per sample."""

    def __init__(self, mean: float, std: float, sample_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(float(mean), dtype=torch.float32))
        self.register_buffer("std", torch.tensor(float(std), dtype=torch.float32))
        self.sample_shape = tuple(sample_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.to(torch.float32) - self.mean) / self.std
        return x.reshape(x.shape[0], *self.sample_shape)


class ImageNormalize(nn.Module):
    """uint8 NHWC -> float NCHW in [0, 1] -> per-channel (x - mean) / std.

    The same operations, in the same order, as torchvision's ToTensor (float, then / 255) and
    Normalize (subtract, then divide), so the graph sees what evaluation saw.
    """

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        shape = (1, len(mean), 1, 1)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(shape))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2).to(torch.float32).div(255)
        return (x - self.mean) / self.std
