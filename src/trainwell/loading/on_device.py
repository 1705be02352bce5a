"""Image batches gathered, augmented and normalised on the training device.

For image datasets that fit in device memory (CIFAR-10 is 150 MB as uint8): the whole split lives
on the device as uint8, and one batch is one gather plus a few elementwise kernels. Nothing runs
per image on the host: no PIL, no DataLoader workers, no per-step host->device copy of pixels. A GPU
that trains a CIFAR ResNet-18 at tens of thousands of images/s would otherwise wait for the CPU.

The dataset is an ordinary map-style dataset with `__getitems__`: the DataLoader hands it a whole
batch of indices at once, so the template's loader policy (sharding, epoch order, mid-epoch resume;
loading/sharding.py) applies to it unchanged.

Randomness without generator state: a sample's crop offsets and flip are a pure function of
(seed, epoch, sample index), a counter-based hash computed with integer tensor ops. So the
augmentation a sample gets does not depend on which batch it lands in, on how many ranks share the
epoch, or on where a run resumed, and it is the same on CPU and GPU (integer arithmetic is exact).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9  # 2**32 / golden ratio: spreads consecutive epochs/seeds over the key space
_FLIP_STREAM = 0x68E31DA4  # decorrelates the flip bit from the crop offsets of the same sample

Int = TypeVar("Int", int, torch.Tensor)


def _mul32(x: Int, c: int) -> Int:
    """(x * c) mod 2**32 for 0 <= x, c < 2**32, in 16-bit halves: int64 tensors would overflow
    on the full 64-bit product (undefined in C++, so CPU and GPU could disagree)."""
    lo, hi = x & 0xFFFF, x >> 16
    return ((lo * c) + (((hi * c) & 0xFFFF) << 16)) & MASK32


def mix32(h: Int) -> Int:
    """MurmurHash3's 32-bit finaliser: every input bit flips each output bit with p ~ 1/2.
    Works on python ints and on int64 tensors alike, with identical results."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def epoch_key(seed: int, epoch: int) -> int:
    """The 32-bit key of one epoch's augmentations."""
    folded = (seed ^ (seed >> 32)) & MASK32
    return mix32((mix32(folded) + epoch * _GOLDEN) & MASK32)


def crop_and_flip(
    indices: torch.Tensor, seed: int, epoch: int, pad: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dy, dx, flip) for each sample index: crop offsets in [0, 2*pad] into the zero-padded
    image and a horizontal flip, as torchvision's RandomCrop(padding=pad) + RandomHorizontalFlip
    draw them (uniform offsets, p=0.5 flip), but a pure function of (seed, epoch, index)."""
    h = mix32((indices & MASK32) ^ epoch_key(seed, epoch))
    span = 2 * pad + 1
    dy = (h & 0xFFFF) % span  # 16 bits per offset: modulo bias < 1e-4
    dx = (h >> 16) % span
    flip = (mix32(h ^ _FLIP_STREAM) & 1).bool()
    return dy, dx, flip


def keep_batch(batch: Any) -> Any:
    """collate_fn for datasets whose `__getitems__` already returns the finished batch."""
    return batch


class DeviceImages(Dataset):
    """uint8 images (N, H, W, C) and int64 labels (N,) on one device, served a batch at a time.

    A batch: gather the images, (train) crop each from its padded image (pixel value `fill`, 0 as
    torchvision pads) at its own offsets and flip it, then `float / 255`, subtract `mean`, divide by `std` (per channel, in the [0, 1]
    scale: exactly torchvision's ToTensor + Normalize, bit for bit). Returned as (N, C, H, W)
    float32; with `channels_last` the memory is NHWC (what tensor-core convolutions read), which
    the HWC storage gives for free.

    `set_epoch(e)` (called by the template's train loader before every epoch) selects the epoch's
    augmentations.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        mean: Sequence[float],
        std: Sequence[float],
        augment: bool = False,
        pad: int = 4,
        seed: int = 0,
        channels_last: bool = True,
        fill: int = 0,
    ) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(
                f"images must be uint8 (N, H, W, C), got {images.dtype} {images.shape}"
            )
        if labels.shape != images.shape[:1]:
            raise ValueError(f"{labels.shape[0]} labels for {images.shape[0]} images")
        channels = images.shape[-1]
        if len(mean) != channels or len(std) != channels:
            raise ValueError(f"mean/std need {channels} values (one per channel)")
        self.images = images.contiguous()  # HWC in memory: torchvision's CIFAR arrays are views
        self.labels = labels.long()
        self.mean = torch.tensor(mean, dtype=torch.float32, device=images.device)
        self.std = torch.tensor(std, dtype=torch.float32, device=images.device)
        self.augment, self.pad, self.seed = augment, int(pad), int(seed)
        self.channels_last = channels_last
        self.fill = int(fill)
        self.epoch = 0

    @property
    def device(self) -> torch.device:
        return self.images.device

    def to(self, device: torch.device | str) -> DeviceImages:
        """Move the stored split (in place; returns self)."""
        device = torch.device(device)
        if device != self.device:
            self.images, self.labels = self.images.to(device), self.labels.to(device)
            self.mean, self.std = self.mean.to(device), self.std.to(device)
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def _index_tensor(self, indices: Sequence[int]) -> torch.Tensor:
        idx = torch.as_tensor(indices, dtype=torch.long)
        if self.device.type == "cuda":
            # From pinned memory the copy is asynchronous. A pageable host->device copy waits for
            # the whole stream to drain: a host sync on every training step.
            return idx.pin_memory().to(self.device, non_blocking=True)
        return idx.to(self.device)

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = self._index_tensor(indices)
        pixels = self.images[idx]  # (B, H, W, C) uint8
        if self.augment and self.pad > 0:
            pixels = self._crop_and_flip(pixels, idx)
        x = pixels.float().div(255).sub(self.mean).div(self.std).permute(0, 3, 1, 2)
        if not self.channels_last:
            x = x.contiguous()
        return x, self.labels[idx]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.__getitems__([index])
        return x[0], y[0]

    def _crop_and_flip(self, pixels: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        b, h, w, _ = pixels.shape
        p = self.pad
        padded = F.pad(pixels, (0, 0, p, p, p, p), value=self.fill)  # RandomCrop(padding=p, fill)
        dy, dx, flip = crop_and_flip(idx, self.seed, self.epoch, p)
        rows = dy[:, None] + torch.arange(h, device=idx.device)
        cols = torch.arange(w, device=idx.device).expand(b, w)
        cols = dx[:, None] + torch.where(flip[:, None], w - 1 - cols, cols)
        batch = torch.arange(b, device=idx.device)
        return padded[batch[:, None, None], rows[:, :, None], cols[:, None, :]]


def placement(datamodule: Any) -> torch.device:
    """Where a datamodule's on-device splits live: its `device` attribute when set, else the
    attached Trainer's root device (this rank's GPU under DDP), else the CPU."""
    explicit = getattr(datamodule, "device", None)
    if explicit is not None:
        return torch.device(explicit)
    trainer = getattr(datamodule, "trainer", None)
    if trainer is not None:
        return trainer.strategy.root_device
    return torch.device("cpu")
