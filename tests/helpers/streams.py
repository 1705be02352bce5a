"""Two iterable (streaming) datamodules: one restartable, one not.

`RestartableStreamData`'s stream is a function of (seed, epoch) and can start at any sample
(`set_epoch`, `start_at`): a mid-epoch resume continues it exactly. `PlainStreamData` draws from a
generator it keeps across epochs: nothing can put it back where a checkpoint was written.
"""

from __future__ import annotations

from collections.abc import Iterator

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

SAMPLES = 30  # batches of 8: 8, 8, 8, 6


def _samples(generator: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 4, generator=generator)
    return x, (x.sum(1) > 0).long()


class RestartableStream(IterableDataset):
    def __init__(self, seed: int = 0) -> None:
        self.seed, self.epoch, self.start = seed, 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def start_at(self, index: int) -> None:
        self.start = index

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
        x, y = _samples(g, SAMPLES)
        for i in range(self.start, SAMPLES):
            yield x[i], y[i]


class PlainStream(IterableDataset):
    def __init__(self, seed: int = 0) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        x, y = _samples(self.generator, SAMPLES)
        yield from zip(x, y, strict=True)


class _StreamData(L.LightningDataModule):
    stream: type[IterableDataset]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.stream(), batch_size=8)

    def val_dataloader(self) -> DataLoader:
        x, y = _samples(torch.Generator().manual_seed(99), 16)
        return DataLoader(TensorDataset(x, y), batch_size=8)


class RestartableStreamData(_StreamData):
    stream = RestartableStream


class PlainStreamData(_StreamData):
    stream = PlainStream
