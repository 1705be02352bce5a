"""Random augmentation on the host as a function of (seed, epoch, sample), like the on-device path.

A transform that draws from a DataLoader worker's RNG stream gives a sample whatever that stream
holds when the sample reaches the worker: the result changes with `num_workers`, with which
worker a batch lands on, and with any batch a resumed run does not load again. Here each sample's
transform runs with the torch RNG seeded from (seed, epoch, index) and restored afterwards, so a
sample's augmentation is the same in any worker, with any number of workers, on any rank, and
when a resume skips the batches before it without loading them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import Dataset

from trainwell.loading.on_device import MASK32, epoch_key, mix32


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 32-bit seed per (seed, epoch, index): distinct for every index of one epoch (mix32 is a
    bijection), and the same key the on-device augmentation uses for that sample."""
    return mix32((int(index) & MASK32) ^ epoch_key(int(seed), int(epoch)))


class PerSampleRandom(Dataset):
    """`dataset[i]` with `transform` applied to its input, drawing its randomness from torch's
    CPU generator seeded by `sample_seed(seed, epoch, i)` (torchvision's random transforms draw
    from that generator). The generator's previous state is restored afterwards: the worker's
    own stream (dropout in the main process, a user's code) does not move.

    `set_epoch(e)` (the template's train loader calls it before every epoch) selects the epoch.
    """

    def __init__(self, dataset: Any, transform: Callable[[Any], Any], seed: int) -> None:
        self.dataset, self.transform, self.seed = dataset, transform, int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        x, y = self.dataset[index]
        generator = torch.default_generator
        state = generator.get_state()
        # The CPU generator only: torch.manual_seed would also reseed every CUDA device.
        generator.manual_seed(sample_seed(self.seed, self.epoch, index))
        try:
            x = self.transform(x)
        finally:
            generator.set_state(state)
        return x, y
