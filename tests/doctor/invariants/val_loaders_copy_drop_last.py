"""One helper builds every loader, with the train loader's `drop_last=True` (keeping batch
shapes static), so validation and test drop their last partial batch too: of 360 validation
samples, 320 are scored, and the logged val metrics are those of a subset.

Invariant: every evaluated split is scored on each of its samples exactly once (eval.coverage).
"""

from __future__ import annotations

from torch.utils.data import DataLoader, Dataset

from tests.doctor.reported._common import Digits


class Buggy(Digits):
    def loader(self, data: Dataset, train: bool) -> DataLoader:
        return DataLoader(data, batch_size=64, shuffle=train, drop_last=True)

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.train, train=True)  # type: ignore[arg-type]

    def val_dataloader(self) -> DataLoader:
        return self.loader(self.val, train=False)


class Healthy(Buggy):
    """The fix: only the train loader drops its last partial batch."""

    def loader(self, data: Dataset, train: bool) -> DataLoader:
        return DataLoader(data, batch_size=64, shuffle=train, drop_last=train)
