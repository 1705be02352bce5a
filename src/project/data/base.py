"""The DataLoader knobs trainwell's own datamodules share.

Subclasses only build `train_set`, `val_set` and `test_set` in `setup`. Nothing here is required of
a user's datamodule: any LightningDataModule works, and the template shards, orders and resumes
its loaders the same way (loading/sharding.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from trainwell.errors import TrainwellError


class SplitDataModule(L.LightningDataModule):
    """Train/val/test loaders over datasets built in `setup`.

    `batch_size` is the micro-batch: what one forward pass sees. With gradient accumulation the
    effective batch is batch_size x accumulate_grad_batches x world size (see training.plan).
    """

    def __init__(
        self,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        sampler: str = "shuffle",
        samples_per_epoch: int | None = None,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise TrainwellError(f"data.batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        # Pinned memory only helps host->GPU copies; on a CPU-only machine it costs a copy and warns.
        self.pin_memory = bool(pin_memory if pin_memory is not None else torch.cuda.is_available())
        self.pin_memory = self.pin_memory and torch.cuda.is_available()
        self.persistent_workers = persistent_workers and num_workers > 0
        self.drop_last = drop_last
        self.seed = seed
        # Read by the template's loader policy (loading/sharding.py), which builds the sampler:
        # "weighted" draws with replacement, by `sample_weights()` if a subclass defines it, else
        # by inverse class frequency; `samples_per_epoch` (None: the train split's size).
        if sampler not in ("shuffle", "weighted"):
            raise TrainwellError(f"data.sampler must be shuffle or weighted, got {sampler!r}")
        self.sampler = sampler
        self.samples_per_epoch = samples_per_epoch
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None
        self.collate_fn: Callable[[list[Any]], Any] | None = None

    def _require(self, split: str) -> Dataset:
        dataset = getattr(self, f"{split}_set")
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() has not built the {split} split")
        if len(dataset) == 0:
            raise TrainwellError(
                f"the {split} split of {type(self).__name__} is empty; check the split sizes in data"
            )
        return dataset

    def _loader(self, dataset: Dataset, batch_size: int, train: bool) -> DataLoader:
        # A seeded generator per loader: the train shuffle is then a function of data.seed and the
        # epoch (the template turns it into one, identical on every rank), and no iter() draws a
        # worker seed from the global RNG, which would shift the dropout stream after every
        # validation pass and make a resumed run drift from the uninterrupted one.
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=train,
            drop_last=self.drop_last if train else False,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            collate_fn=self.collate_fn,
            generator=torch.Generator().manual_seed(self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        dataset = self._require("train")
        if self.drop_last and len(dataset) < self.batch_size:
            raise TrainwellError(
                f"data.batch_size={self.batch_size} is larger than the {len(dataset)}-sample train "
                "split with drop_last=true, so an epoch has no batch; lower data.batch_size"
            )
        return self._loader(dataset, self.batch_size, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._require("val"), self.eval_batch_size, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._require("test"), self.eval_batch_size, train=False)


class ClassificationDataModule(SplitDataModule):
    """A SplitDataModule whose samples are (input, class id) pairs over `num_classes` classes."""

    num_classes: int = 0
