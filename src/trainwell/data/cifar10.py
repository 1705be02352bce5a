"""CIFAR-10 through torchvision: downloads on a user's machine, fails clearly when it cannot."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import Subset
from torchvision import transforms
from torchvision.datasets import CIFAR10

from trainwell.data.base import ClassificationDataModule
from trainwell.errors import TrainwellError

# Per-channel statistics of the 50,000 CIFAR-10 training images (train split only).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


class CIFAR10DataModule(ClassificationDataModule):
    """CIFAR-10 with a seeded validation split carved from the training set.

    Augmentation (random crop with 4-pixel padding + horizontal flip) runs on the train split only:
    the validation images come from the same files but through the eval transform, otherwise
    validation accuracy would be measured on randomly cropped images.
    """

    num_classes = 10

    def __init__(
        self,
        data_dir: str = "data/cifar10",
        download: bool = False,
        val_size: int = 5000,
        augment: bool = True,
        **loader_kwargs,
    ) -> None:
        super().__init__(**loader_kwargs)
        self.data_dir = str(data_dir)
        self.download = download
        self.val_size = val_size
        self.augment = augment

    def prepare_data(self) -> None:
        if self.download:
            CIFAR10(self.data_dir, train=True, download=True)
            CIFAR10(self.data_dir, train=False, download=True)

    def _dataset(self, train: bool, transform: transforms.Compose) -> CIFAR10:
        try:
            return CIFAR10(self.data_dir, train=train, transform=transform, download=False)
        except RuntimeError as err:
            folder = Path(self.data_dir).resolve() / CIFAR10.base_folder
            raise TrainwellError(
                f"CIFAR-10 not found or corrupt at {folder}; download it with data.download=true "
                f"or point data.data_dir=<dir> at a folder holding {CIFAR10.base_folder}/"
            ) from err

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        normalize = transforms.Normalize(CIFAR10_MEAN, CIFAR10_STD)
        eval_tf = transforms.Compose([transforms.ToTensor(), normalize])
        train_tf = eval_tf
        if self.augment:
            train_tf = transforms.Compose(
                [
                    transforms.RandomCrop(32, padding=4),
                    transforms.RandomHorizontalFlip(),
                    transforms.ToTensor(),
                    normalize,
                ]
            )
        train_aug = self._dataset(train=True, transform=train_tf)
        train_plain = self._dataset(train=True, transform=eval_tf)
        if not 0 < self.val_size < len(train_aug):
            raise TrainwellError(
                f"data.val_size={self.val_size} must be between 1 and {len(train_aug) - 1} "
                f"(the CIFAR-10 train files hold {len(train_aug)} images)"
            )
        order = torch.randperm(len(train_aug), generator=torch.Generator().manual_seed(self.seed))
        val_idx, train_idx = order[: self.val_size].tolist(), order[self.val_size :].tolist()
        self.train_set = Subset(train_aug, train_idx)
        self.val_set = Subset(train_plain, val_idx)
        self.test_set = self._dataset(train=False, transform=eval_tf)
