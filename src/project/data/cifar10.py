"""CIFAR-10 through torchvision: downloads on a user's machine, fails clearly when it cannot.

Two data paths, same splits: per-image PIL transforms in DataLoader workers (default), or
`data.on_device=true`, the whole dataset as uint8 on the training device with crop, flip and
normalisation applied per batch there (loading/on_device.py): what keeps a GPU fed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Subset
from torchvision import transforms
from torchvision.datasets import CIFAR10

from project.data.base import ClassificationDataModule
from trainwell.blocks.preprocess import ImageNormalize
from trainwell.errors import TrainwellError
from trainwell.loading.on_device import DeviceImages, keep_batch, placement
from trainwell.loading.per_sample import PerSampleRandom

# Per-channel statistics of the 50,000 CIFAR-10 training images (train split only).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


class CIFAR10DataModule(ClassificationDataModule):
    """CIFAR-10 with a seeded validation split carved from the training set.

    Augmentation (random crop with 4-pixel padding + horizontal flip) runs on the train split only:
    the validation images come from the same files but through the eval transform, otherwise
    validation accuracy would be measured on randomly cropped images.

    `on_device=true`: the splits live on the Trainer's device (`self.device` overrides it) and
    batches come out augmented, normalised and (`channels_last`) NHWC; the loaders then run without
    workers (there is no per-image host work to spread). Augmentations differ per sample and epoch,
    are a function of (data.seed, epoch, sample), and evaluation images equal the CPU path's bit for
    bit. On the default path the crop and flip are a function of (data.seed, epoch, sample) too
    (loading/per_sample.py): the same weights with any `num_workers`.
    """

    num_classes = 10

    def __init__(
        self,
        data_dir: str = "data/cifar10",
        download: bool = False,
        val_size: int = 5000,
        augment: bool = True,
        on_device: bool = False,
        channels_last: bool = True,
        **loader_kwargs,
    ) -> None:
        super().__init__(**loader_kwargs)
        self.data_dir = str(data_dir)
        self.download = download
        self.val_size = val_size
        self.augment = augment
        self.on_device = on_device
        self.channels_last = channels_last
        self.device: torch.device | None = None
        # The eval-time normalisation, saved in every checkpoint (state_dict): prediction and
        # export read the numbers the model was trained with, not what this file says later.
        self.mean: tuple[float, ...] = CIFAR10_MEAN
        self.std: tuple[float, ...] = CIFAR10_STD
        self.split_indices: dict[str, np.ndarray] = {}
        if on_device:
            self.num_workers, self.persistent_workers, self.pin_memory = 0, False, False
            self.collate_fn = keep_batch

    def prepare_data(self) -> None:
        if self.download:
            CIFAR10(self.data_dir, train=True, download=True)
            CIFAR10(self.data_dir, train=False, download=True)

    def _dataset(self, train: bool, transform: transforms.Compose | None) -> CIFAR10:
        try:
            return CIFAR10(self.data_dir, train=train, transform=transform, download=False)
        except RuntimeError as err:
            folder = Path(self.data_dir).resolve() / CIFAR10.base_folder
            raise TrainwellError(
                f"CIFAR-10 not found or corrupt at {folder}; download it with data.download=true "
                f"or point data.data_dir=<dir> at a folder holding {CIFAR10.base_folder}/"
            ) from err

    def _split(self, size: int) -> tuple[list[int], list[int]]:
        if not 0 < self.val_size < size:
            raise TrainwellError(
                f"data.val_size={self.val_size} must be between 1 and {size - 1} "
                f"(the CIFAR-10 train files hold {size} images)"
            )
        order = torch.randperm(size, generator=torch.Generator().manual_seed(self.seed))
        return order[: self.val_size].tolist(), order[self.val_size :].tolist()

    def raw_dataset(self, train: bool) -> CIFAR10:
        """The train or test files without transforms: `.data` is uint8 (N, 32, 32, 3)."""
        return self._dataset(train=train, transform=None)

    def raw_form(self) -> dict[str, Any]:
        """What predict, export and the server take: uint8 (N, 32, 32, 3) HWC, as torchvision's
        `CIFAR10(...).data`; the graph scales to [0, 1], normalises per channel with this
        checkpoint's mean and std and permutes to NCHW: the eval transform (ToTensor + Normalize)
        as tensor ops."""
        train, test = self.raw_dataset(train=True), self.raw_dataset(train=False)
        splits = {}
        for name, idx in self.split_indices.items():
            files = test if name == "test" else train
            labels = np.asarray(files.targets, dtype=np.int64)
            splits[name] = (files.data[idx], idx, labels[idx])
        return {
            "input": {
                "dtype": "uint8",
                "shape": [None, 32, 32, 3],
                "range": [0, 255],
                "description": "32x32 RGB images, uint8 HWC, as torchvision's CIFAR10(...).data",
            },
            "splits": splits,
            "preprocess": ImageNormalize(self.mean, self.std),
            "classes": list(train.classes),
        }

    def _record_splits(self, val_idx: list[int], train_idx: list[int], test_size: int) -> None:
        # A sample's index is its row in the train files (train, val) or the test file (test).
        self.split_indices = {
            "train": np.asarray(train_idx, dtype=np.int64),
            "val": np.asarray(val_idx, dtype=np.int64),
            "test": np.arange(test_size, dtype=np.int64),
        }

    def state_dict(self) -> dict[str, Any]:
        """The eval-time normalisation: Lightning writes it into every checkpoint."""
        return {"mean": list(self.mean), "std": list(self.std)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "mean" in state_dict and "std" in state_dict:
            self.mean = tuple(float(v) for v in state_dict["mean"])
            self.std = tuple(float(v) for v in state_dict["std"])

    def setup(self, stage: str | None = None) -> None:
        if self.on_device:
            self._setup_on_device()
            return
        if self.train_set is not None:
            return
        normalize = transforms.Normalize(self.mean, self.std)
        eval_tf = transforms.Compose([transforms.ToTensor(), normalize])
        train_plain = self._dataset(train=True, transform=eval_tf)
        val_idx, train_idx = self._split(len(train_plain))
        if self.augment:
            # Crop and flip drawn per sample from (data.seed, epoch, index), not from a worker's
            # RNG stream: results do not depend on num_workers, and a resume can skip batches.
            train_tf = transforms.Compose(
                [
                    transforms.RandomCrop(32, padding=4),
                    transforms.RandomHorizontalFlip(),
                    transforms.ToTensor(),
                    normalize,
                ]
            )
            raw = Subset(self._dataset(train=True, transform=None), train_idx)
            self.train_set = PerSampleRandom(raw, train_tf, seed=self.seed)
        else:
            self.train_set = Subset(train_plain, train_idx)
        self.val_set = Subset(train_plain, val_idx)
        self.test_set = self._dataset(train=False, transform=eval_tf)
        self._record_splits(val_idx, train_idx, len(self.test_set))

    def _setup_on_device(self) -> None:
        device = placement(self)
        if self.train_set is None:
            train, test = self._dataset(train=True, transform=None), self._dataset(False, None)
            val_idx, train_idx = self._split(len(train))
            images = torch.from_numpy(train.data)  # (N, 32, 32, 3) uint8, as in the files
            labels = torch.tensor(train.targets)

            def split(x: torch.Tensor, y: torch.Tensor, augment: bool) -> DeviceImages:
                return DeviceImages(
                    x, y, self.mean, self.std, augment=augment, pad=4, seed=self.seed,
                    channels_last=self.channels_last,
                )  # fmt: skip

            self.train_set = split(images[train_idx], labels[train_idx], self.augment)
            self.val_set = split(images[val_idx], labels[val_idx], False)
            self.test_set = split(torch.from_numpy(test.data), torch.tensor(test.targets), False)
            self._record_splits(val_idx, train_idx, len(test))
        # Also when a split was built before a Trainer was attached (on the CPU): follow the device.
        for dataset in (self.train_set, self.val_set, self.test_set):
            dataset.to(device)  # type: ignore[union-attr]
