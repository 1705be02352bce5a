"""DataModules written the way public Lightning projects write them (no trainwell imports).

All data is seeded random tensors (class blobs), a few dozen samples per split, so one training
run lasts a few seconds. Each split comes from its own seeded generator: the same samples on
every launch (a killed run and its resume see the same data) and no sample shared by two splits.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


def blobs(n: int, features: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` points around `classes` fixed centres: learnable in a few steps, never duplicated."""
    centres = torch.randn(classes, features, generator=torch.Generator().manual_seed(1234)) * 2
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    return centres[y] + torch.randn(n, features, generator=g), y


class BlobsData(L.LightningDataModule):
    """(features, label) tuples: train / val / test (and predict = test) splits."""

    def __init__(
        self,
        batch_size: int = 16,
        train_size: int = 96,
        val_size: int = 32,
        test_size: int = 32,
        features: int = 8,
        classes: int = 3,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()

    def _split(self, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return blobs(size, self.hparams.features, self.hparams.classes, seed)

    def setup(self, stage: str | None = None) -> None:
        self.train_set = TensorDataset(*self._split(self.hparams.train_size, 1))
        self.val_set = TensorDataset(*self._split(self.hparams.val_size, 2))
        self.test_set = TensorDataset(*self._split(self.hparams.test_size, 3))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> Any:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return self.test_dataloader()


class TemplateStyleData(BlobsData):
    """lightning-hydra-template's datamodule shape: state_dict() returns {} and load_state_dict()
    does nothing (no state travels with checkpoints), plus a teardown hook."""

    def teardown(self, stage: str | None = None) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


class TwoValData(BlobsData):
    """Two validation loaders (the val split, then a second held-out split): `dataloader_idx`."""

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        self.val_set_2 = TensorDataset(*self._split(self.hparams.val_size, 4))

    def val_dataloader(self) -> list[DataLoader]:
        return [
            DataLoader(self.val_set, batch_size=self.hparams.batch_size),
            DataLoader(self.val_set_2, batch_size=self.hparams.batch_size),
        ]


class DictDataset(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"features": self.x[index], "label": self.y[index]}


class DictBatchData(BlobsData):
    """Batches are dicts `{"features": ..., "label": ...}` (the default collate of dict samples)."""

    def setup(self, stage: str | None = None) -> None:
        self.train_set = DictDataset(*self._split(self.hparams.train_size, 1))
        self.val_set = DictDataset(*self._split(self.hparams.val_size, 2))
        self.test_set = DictDataset(*self._split(self.hparams.test_size, 3))


class TokenData(L.LightningDataModule):
    """(tokens, next tokens) batches of a counting language: token t is followed by t + 1."""

    def __init__(self, batch_size: int = 8, length: int = 6, vocab: int = 12) -> None:
        super().__init__()
        self.save_hyperparameters()

    def _split(self, size: int, seed: int) -> TensorDataset:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, self.hparams.vocab, (size, 1), generator=g)
        seq = (start + torch.arange(self.hparams.length + 1)) % self.hparams.vocab
        return TensorDataset(seq[:, :-1], seq[:, 1:])

    def setup(self, stage: str | None = None) -> None:
        self.train_set, self.val_set = self._split(64, 1), self._split(16, 2)
        self.test_set = self._split(16, 3)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)
