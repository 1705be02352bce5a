"""What a user writes before the fix a message names: each class here draws one suggesting
message from the engine, and tests/test_suggested_fixes.py makes the fix the message words (an
override, or the edit in a copy of the class) and runs the same command again.

Plain Lightning code built on the engine tests' own modules (tests/owned); nothing of trainwell.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.owned.data import OwnedDigits
from tests.owned.task import OwnedClassifier


class DigitsWithoutClassCount(OwnedDigits):
    """A datamodule that declares no number of classes (the task's default reads it)."""

    num_classes = None  # type: ignore[assignment]


class FrozenBodyClassifier(OwnedClassifier):
    """A frozen feature extractor put in eval mode once, at construction: Lightning 2.6 never
    calls train() at fit start, so the body trains in eval mode."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.net.body.eval()


class OwnLrClassifier(OwnedClassifier):
    """Builds its optimizer with an LR of its own instead of the `_partial_` it is handed."""

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class WholeBatchesDigits(OwnedDigits):
    """A train loader over ready-made batches (batch_size=None): no batch size to read and no
    sample index to deal out."""

    def train_dataloader(self) -> DataLoader:
        data = self._dataset("train")
        batches = [data[i : i + 32] for i in range(0, len(data), 32)]
        return DataLoader(batches, batch_size=None)
