"""Augmentation drawn from numpy's global RNG: every DataLoader worker repeats the same draws.

(Lightning's `seed_everything(workers=True)` reseeds numpy per worker, which hides the repeats,
but the augmentation still depends on num_workers and on which worker loads a sample.)

Source: https://github.com/pytorch/pytorch/issues/5059
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from tests.doctor.reported._common import Digits


class _NumpyNoise(Dataset):
    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def noise(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.from_numpy(np.random.normal(size=shape).astype(np.float32))

    def __getitem__(self, i: int):
        x, y = self.base[i]
        return x + 0.1 * self.noise(tuple(x.shape)), y


class _SampleNoise(_NumpyNoise):
    """Each sample draws from its own generator, seeded by its index: no worker shares draws."""

    def __getitem__(self, i: int):
        x, y = self.base[i]
        generator = torch.Generator().manual_seed(i)
        return x + 0.1 * torch.randn(tuple(x.shape), generator=generator), y


class Buggy(Digits):
    def __init__(self, batch_size: int = 32, num_workers: int = 2) -> None:
        super().__init__(batch_size, num_workers)

    def wrap(self, train: Dataset) -> Dataset:
        return _NumpyNoise(train)


class Healthy(Buggy):
    """The fix: a generator per sample instead of a process-global RNG."""

    def wrap(self, train: Dataset) -> Dataset:
        return _SampleNoise(train)
