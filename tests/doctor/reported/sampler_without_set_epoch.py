"""A distributed-style sampler that shuffles from a generator seeded with `seed + epoch` but has
no `set_epoch` (so neither the loop nor Lightning can advance it): every epoch visits the
samples in the same shuffled order.

Source: https://github.com/pytorch/pytorch/issues/31771 (and https://github.com/pytorch/pytorch/issues/11324)
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Sampler

from tests.doctor.reported._common import Digits


class ShardSampler(Sampler[int]):
    """This rank's share of a permutation drawn from `seed + epoch` (one rank here)."""

    def __init__(self, size: int, rank: int = 0, world: int = 1, seed: int = 0) -> None:
        self.size, self.rank, self.world, self.seed = size, rank, world, seed
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.size, generator=generator).tolist()
        return iter(order[self.rank :: self.world])

    def __len__(self) -> int:
        return len(range(self.rank, self.size, self.world))


class EpochShardSampler(ShardSampler):
    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class Buggy(Digits):
    sampler_class: type[ShardSampler] = ShardSampler

    def train_dataloader(self) -> DataLoader:
        assert self.train is not None
        sampler = self.sampler_class(len(self.train))  # type: ignore[arg-type]
        return DataLoader(self.train, batch_size=self.batch_size, sampler=sampler)


class Healthy(Buggy):
    """The fix: give the sampler set_epoch (Lightning calls it at every epoch start)."""

    sampler_class = EpochShardSampler
