"""CIFAR-shaped synthetic data: learnable, deterministic, sized by config.

For tests and GPU throughput runs where CIFAR-10 cannot be downloaded. Each class has a smooth
random colour pattern; a sample is its class pattern at a random contrast plus pixel noise, so a
network has to learn something real but a ResNet gets well above chance within an epoch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from trainwell.data.base import ClassificationDataModule


def make_synthetic(
    num_samples: int, num_classes: int, seed: int, noise: float, image_size: int = 32
) -> TensorDataset:
    """`num_samples` images of shape 3 x image_size x image_size with balanced random labels."""
    gen = torch.Generator().manual_seed(seed)
    # Prototypes depend only on the seed, so every split of one datamodule shares the same classes.
    coarse = torch.randn(num_classes, 3, 4, 4, generator=gen)
    prototypes = F.interpolate(coarse, size=image_size, mode="bicubic", align_corners=False)
    labels = torch.randint(0, num_classes, (num_samples,), generator=gen)
    contrast = 0.5 + torch.rand(num_samples, 1, 1, 1, generator=gen)
    pixels = torch.randn(num_samples, 3, image_size, image_size, generator=gen)
    images = prototypes[labels] * contrast + noise * pixels
    return TensorDataset(images, labels)


class SyntheticDataModule(ClassificationDataModule):
    """`num_samples` training images plus `num_val` / `num_test` held-out ones (3x32x32, 10 classes)."""

    def __init__(
        self,
        num_samples: int = 4096,
        num_val: int = 512,
        num_test: int = 512,
        num_classes: int = 10,
        noise: float = 1.0,
        **loader_kwargs,
    ) -> None:
        super().__init__(**loader_kwargs)
        self.num_samples = num_samples
        self.num_val = num_val
        self.num_test = num_test
        self.num_classes = num_classes
        self.noise = noise

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        total = self.num_samples + self.num_val + self.num_test
        full = make_synthetic(total, self.num_classes, self.seed, self.noise)
        images, labels = full.tensors
        cuts = [self.num_samples, self.num_samples + self.num_val]
        self.train_set = TensorDataset(images[: cuts[0]], labels[: cuts[0]])
        self.val_set = TensorDataset(images[cuts[0] : cuts[1]], labels[cuts[0] : cuts[1]])
        self.test_set = TensorDataset(images[cuts[1] :], labels[cuts[1] :])
