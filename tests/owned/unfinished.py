"""What a user writes before the fix a message names: each class here draws one suggesting
message from the engine, and tests/test_suggested_fixes.py makes the fix the message words (an
override, or the edit in a copy of the class) and runs the same command again.

Plain Lightning code built on the engine tests' own modules (tests/owned); nothing of trainwell
but what a task of the template's may use (load_from_checkpoint, the net's setup under FSDP).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.owned.data import OwnedDigits
from tests.owned.task import OwnedClassifier
from trainwell.blocks.checkpoint_loading import LoadsLikeLoadTrained
from trainwell.blocks.model_setup import shard_and_compile


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


class LoadableClassifier(LoadsLikeLoadTrained, OwnedClassifier):
    """The engine tests' task with trainwell's load_from_checkpoint, as a task of a cloner's
    writes it; a run of the plain OwnedClassifier is not one of these."""


def owned_digits(**settings: Any) -> OwnedDigits:
    """A datamodule made by a factory function (data._target_ names a function, not a class)."""
    return OwnedDigits(**settings)


class NanDigits(OwnedDigits):
    """Every 16th training image holds a NaN (corrupt rows of a CSV read as they are)."""

    def _dataset(self, split: str) -> TensorDataset:
        data = super()._dataset(split)
        if split == "train":
            data.tensors[0][::16, 2, 2] = float("nan")
        return data


class ShardedClassifier(OwnedClassifier):
    """Shards its net under trainer=fsdp the way the template's tasks do (configure_model)."""

    def configure_model(self) -> None:
        shard_and_compile(self, self.net, compile=False)


class CountedShardedClassifier(ShardedClassifier):
    """The same, declaring the FLOPs of one training batch (forward and backward, 64 samples of
    the 64 -> 32 -> 10 net: 3 x 2 x 64 x (64 x 32 + 32 x 10) multiply-adds)."""

    flops_per_batch = 3 * 2 * 64 * (64 * 32 + 32 * 10)


class NormNet(nn.Module):
    """A net that takes its normalisation as `norm`, as the template's nets do (batch | group)."""

    def __init__(
        self, num_classes: int = 10, hidden: int = 32, dropout: float = 0.0, norm: str = "batch"
    ) -> None:
        super().__init__()
        layer = nn.BatchNorm1d(hidden) if norm == "batch" else nn.GroupNorm(4, hidden)
        self.body = nn.Sequential(
            nn.Flatten(), nn.Linear(64, hidden), layer, nn.Tanh(), nn.Dropout(dropout)
        )
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class BatchNormNet(NormNet):
    """The same with BatchNorm and no switch (a net of the user's own)."""

    def __init__(self, num_classes: int = 10, hidden: int = 32, dropout: float = 0.0) -> None:
        super().__init__(num_classes, hidden, dropout, "batch")
