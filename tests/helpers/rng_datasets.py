"""Digits datamodules whose train samples carry random noise drawn from different RNGs, for the
doctor's `data.worker_seeding` check (loaded by `data._target_=tests.helpers.rng_datasets.<name>`)."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import Dataset

from project.data.digits import DigitsDataModule


class _Noisy(Dataset):
    def __init__(self, base: Dataset, source: str) -> None:
        self.base, self.source = base, source

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, i: int):
        x, y = self.base[i]
        if self.source == "torch":
            noise = torch.randn(x.shape)
        elif self.source == "python":
            noise = torch.full(x.shape, random.random())
        elif self.source == "numpy":
            noise = torch.from_numpy(np.random.standard_normal(tuple(x.shape)).astype("float32"))
        else:  # per sample: a generator seeded by the index
            noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(i))
        return x + 0.1 * noise, y


class NoisyDigits(DigitsDataModule):
    def __init__(self, noise_source: str = "torch", **kwargs) -> None:
        super().__init__(**kwargs)
        self.noise_source = noise_source

    def setup(self, stage=None):
        if self.train_set is not None:
            return
        super().setup(stage)
        self.train_set = _Noisy(self.train_set, self.noise_source)
