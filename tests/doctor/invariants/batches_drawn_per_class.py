"""A batch sampler written to balance the classes: it cycles through the classes and fills
each batch with samples of the current one. Every class gets its turn, but every batch holds
one class.

Invariant: a training batch looks like the training set (data.batch_composition).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Sampler

from tests.doctor.reported._common import Digits


class ClassBatches(Sampler[list[int]]):
    def __init__(self, labels: torch.Tensor, batch_size: int) -> None:
        self.labels, self.batch_size = labels, batch_size
        self.members = [torch.nonzero(labels == c).flatten() for c in labels.unique()]

    def __len__(self) -> int:
        return len(self.labels) // self.batch_size

    def batch(self, step: int) -> list[int]:
        """The current class's samples, at random."""
        members = self.members[step % len(self.members)]
        return members[torch.randint(len(members), (self.batch_size,))].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(len(self)):
            yield self.batch(step)


class MixedBatches(ClassBatches):
    def batch(self, step: int) -> list[int]:
        """An equal share of every class, at random."""
        share = -(-self.batch_size // len(self.members))
        picks = [m[torch.randint(len(m), (share,))] for m in self.members]
        return torch.cat(picks)[torch.randperm(share * len(picks))][: self.batch_size].tolist()


class Buggy(Digits):
    sampler = ClassBatches

    def train_dataloader(self) -> DataLoader:
        labels = self.train.tensors[1]  # type: ignore[union-attr]
        return DataLoader(self.train, batch_sampler=self.sampler(labels, self.batch_size))


class Healthy(Buggy):
    """The fix: every batch takes an equal share of every class."""

    sampler = MixedBatches
