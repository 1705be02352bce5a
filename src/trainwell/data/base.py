"""The DataLoader contract every trainwell datamodule shares.

Subclasses only build `train_set`, `val_set` and `test_set` in `setup`; the loaders, and the
knobs that silently change training (shuffle, drop_last, worker seeding), are decided here once.
"""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from trainwell.data.resumable import ResumableDataLoader
from trainwell.errors import TrainwellError


class ClassificationDataModule(L.LightningDataModule):
    """Train/val/test loaders for a classification dataset.

    `batch_size` is the micro-batch: what one forward pass sees. With gradient accumulation the
    effective batch is batch_size x accumulate_grad_batches x world size (see training.plan).
    """

    num_classes: int = 0

    def __init__(
        self,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        drop_last: bool = False,
        seed: int = 0,
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
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

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
        # Train: a stateful loader, so a mid-epoch resume continues with the batches that were
        # next (data/resumable.py). Every loader gets its own generator: without one, each
        # iter() draws a worker base seed from the *global* torch RNG, so every validation pass
        # shifts the dropout stream and a resumed run (one sanity check more, one validation
        # less) would drift from the uninterrupted one.
        loader_cls = ResumableDataLoader if train else DataLoader
        return loader_cls(
            dataset,
            batch_size=batch_size,
            sampler=self._train_sampler(dataset) if train else None,
            drop_last=self.drop_last if train else False,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            generator=torch.Generator().manual_seed(self.seed),
        )

    def _train_sampler(self, dataset: Dataset) -> DistributedSampler:
        """The train order, a documented function of (data.seed, epoch, world size).

        Epoch e shuffles with `torch.randperm(N, generator=manual_seed(data.seed + e))` (padded to a
        multiple of the world size); rank r takes every W-th index. So the global order of samples
        is the same on 1 process or W ranks, and not whatever the global RNG did before (model
        init, augmentation draws). Without this, Lightning's fit injects its own shuffling
        DistributedSampler under DDP (even for shuffle=False loaders) seeded by the global seed,
        while a single process shuffles differently. Lightning calls set_epoch every epoch.
        """
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer else (1, 0)
        return DistributedSampler(
            dataset, num_replicas=world, rank=rank, shuffle=True, seed=self.seed, drop_last=False
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

    def train_size(self) -> int:
        """Number of training samples (for the training plan), set up on demand."""
        if self.train_set is None:
            self.setup("fit")
        return len(self._require("train"))
