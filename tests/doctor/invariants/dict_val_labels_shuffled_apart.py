"""Dict batches ({"image", "label"}) whose validation labels are shuffled (to "mix the
classes") apart from their images: every validation label now belongs to another image.

Invariant: validation measures what training learns (data.split_agreement).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from tests.doctor.reported._common import Classifier, Digits, digits


class Records(Dataset):
    """One {"image", "label"} record per sample."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"image": self.x[i], "label": self.y[i]}


class Model(Classifier):
    """The digits classifier, reading its batches by key."""

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch["image"]), batch["label"])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", F.cross_entropy(self(batch["image"]), batch["label"]))


class Buggy(Digits):
    def mix(self, x: torch.Tensor, y: torch.Tensor) -> Records:
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        return Records(x, y[order])

    def setup(self, stage: str | None = None) -> None:
        x, y = digits()
        cut = int(0.8 * len(x))
        self.train, self.val = Records(x[:cut], y[:cut]), self.mix(x[cut:], y[cut:])


class Healthy(Buggy):
    """The fix: shuffle images and labels with one permutation."""

    def mix(self, x: torch.Tensor, y: torch.Tensor) -> Records:
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        return Records(x[order], y[order])
