"""CIFAR-shaped synthetic data: learnable, deterministic, sized by config.

For tests and GPU throughput runs where CIFAR-10 cannot be downloaded. Each class has a smooth
random colour pattern; a sample is its class pattern at a random contrast plus pixel noise, so a
network has to learn something real but a ResNet gets well above chance within an epoch.

`on_device=true` stores the images as uint8 on the training device and serves them through the
same batch pipeline as CIFAR-10's (loading/on_device.py; `augment=true` adds its crop + flip), so a
throughput run on synthetic data does the per-batch work a CIFAR-10 run does. Off the device,
`augment=true` applies the same crop + flip per sample on the host (loading/per_sample.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset
from torchvision import transforms

from project.data.base import ClassificationDataModule
from trainwell.blocks.preprocess import ImageNormalize
from trainwell.loading.on_device import DeviceImages, keep_batch, placement
from trainwell.loading.per_sample import PerSampleRandom

# uint8 storage of the float images: pixel = round(x * QUANT_SCALE + QUANT_ZERO), clamped. The
# samples have unit-scale noise, so 1/32 steps lose nothing a network could learn, and +-4 covers
# all but ~1e-4 of the pixels. Normalising with these constants maps a pixel back to ~x.
QUANT_SCALE, QUANT_ZERO = 32.0, 128.0
QUANT_MEAN = QUANT_ZERO / 255.0
QUANT_STD = QUANT_SCALE / 255.0


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


def quantize(images: torch.Tensor) -> torch.Tensor:
    """Float NCHW images -> uint8 NHWC (the on-device storage)."""
    pixels = (images * QUANT_SCALE + QUANT_ZERO).round().clamp(0, 255).to(torch.uint8)
    return pixels.permute(0, 2, 3, 1).contiguous()


class SyntheticDataModule(ClassificationDataModule):
    """`num_samples` training images plus `num_val` / `num_test` held-out ones (3x32x32, 10 classes).

    `on_device=true`: uint8 splits on the Trainer's device (`self.device` overrides it), batches
    normalised there, NHWC memory with `channels_last`. `augment=true` crops and flips the
    training images as CIFAR-10's pipeline does, on either path.
    """

    def __init__(
        self,
        num_samples: int = 4096,
        num_val: int = 512,
        num_test: int = 512,
        num_classes: int = 10,
        noise: float = 1.0,
        on_device: bool = False,
        augment: bool = False,
        channels_last: bool = True,
        **loader_kwargs,
    ) -> None:
        super().__init__(**loader_kwargs)
        self.num_samples = num_samples
        self.num_val = num_val
        self.num_test = num_test
        self.num_classes = num_classes
        self.noise = noise
        self.on_device = on_device
        self.augment = augment
        self.channels_last = channels_last
        self.device: torch.device | None = None
        if on_device:
            self.num_workers, self.persistent_workers, self.pin_memory = 0, False, False
            self.collate_fn = keep_batch

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            total = self.num_samples + self.num_val + self.num_test
            full = make_synthetic(total, self.num_classes, self.seed, self.noise)
            images, labels = full.tensors
            cuts = [self.num_samples, self.num_samples + self.num_val]
            parts = [slice(0, cuts[0]), slice(cuts[0], cuts[1]), slice(cuts[1], total)]
            if self.on_device:
                pixels = quantize(images)
                mean, std = [QUANT_MEAN] * 3, [QUANT_STD] * 3
                self.train_set, self.val_set, self.test_set = (
                    DeviceImages(
                        pixels[part],
                        labels[part],
                        mean,
                        std,
                        augment=self.augment and i == 0,
                        pad=4,
                        seed=self.seed,
                        channels_last=self.channels_last,
                        fill=int(QUANT_ZERO),  # pads with 0.0 after normalisation, not -4
                    )
                    for i, part in enumerate(parts)
                )
            else:
                self.train_set, self.val_set, self.test_set = (
                    TensorDataset(images[part], labels[part]) for part in parts
                )
                if self.augment:
                    # CIFAR-10's crop + flip on the float images, per sample from (seed, epoch,
                    # index): the same weights with any num_workers (loading/per_sample.py).
                    crop_flip = transforms.Compose(
                        [transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()]
                    )
                    self.train_set = PerSampleRandom(self.train_set, crop_flip, seed=self.seed)
        if self.on_device:
            # Also when the splits were built before a Trainer was attached (on the CPU).
            for dataset in (self.train_set, self.val_set, self.test_set):
                dataset.to(placement(self))  # type: ignore[union-attr]

    def raw_form(self) -> dict[str, Any]:
        """What predict, export and the server take: float32 (N, 3, 32, 32) as `make_synthetic`
        generates them (the model's input as is); with `on_device=true` the uint8 (N, 32, 32, 3)
        HWC the device stores, normalised back in the graph."""
        total = self.num_samples + self.num_val + self.num_test
        # The data is a function of the run's config (seed, sizes, noise): generated again, exactly.
        images, labels = make_synthetic(total, self.num_classes, self.seed, self.noise).tensors
        val_end = self.num_samples + self.num_val
        cuts = {"train": (0, self.num_samples), "val": (self.num_samples, val_end)}
        cuts["test"] = (val_end, total)
        if self.on_device:
            samples = quantize(images).numpy()
            preprocess: torch.nn.Module = ImageNormalize((QUANT_MEAN,) * 3, (QUANT_STD,) * 3)
            spec = {
                "dtype": "uint8",
                "shape": [None, 32, 32, 3],
                "range": [0, 255],
                "description": "synthetic images stored on the device: uint8 HWC, "
                "round(x * 32 + 128) of the float images (data.on_device=true)",
            }
        else:
            samples, preprocess = images.numpy(), torch.nn.Identity()
            spec = {
                "dtype": "float32",
                "shape": [None, 3, 32, 32],
                "range": None,
                "description": "synthetic float images (N, 3, 32, 32) as "
                "project.data.synthetic.make_synthetic generates them; no preprocessing",
            }
        splits = {}
        for name, (start, stop) in cuts.items():
            idx = np.arange(start, stop, dtype=np.int64)
            splits[name] = (samples[idx], idx, labels.numpy()[idx].astype(np.int64))
        classes = [str(i) for i in range(self.num_classes)]
        return {"input": spec, "splits": splits, "preprocess": preprocess, "classes": classes}
