"""A batch sampler that fills the last batch up with the first samples again, so that every
batch has one shape (for a compiled model): in validation those samples are scored twice.

Invariant: every evaluated split is scored on each of its samples exactly once (eval.coverage).
"""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from tests.doctor.reported._common import Digits


class StaticBatches(BatchSampler):
    def __iter__(self) -> Iterator[list[int]]:
        order = list(self.sampler)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            yield batch + order[: self.batch_size - len(batch)]


class Buggy(Digits):
    def val_dataloader(self) -> DataLoader:
        return DataLoader(
            self.val, batch_sampler=StaticBatches(SequentialSampler(self.val), 64, False)
        )


class Healthy(Buggy):
    """The fix: evaluation keeps its short last batch (a compiled model recompiles once)."""

    def val_dataloader(self) -> DataLoader:
        return DataLoader(
            self.val, batch_sampler=BatchSampler(SequentialSampler(self.val), 64, False)
        )
