"""A tiny module with a plateau (or StepLR) schedule and its data, for exact-resume tests."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class PlateauModule(L.LightningModule):
    def __init__(self, frequency: int, schedule: str = "plateau") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 2)
        self.frequency = frequency
        self.schedule = schedule

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.cross_entropy(self.layer(x), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.5, momentum=0.9)
        # threshold 0.5: only a halving of the loss counts as better, so after the first epoch
        # every epoch cuts the rate (patience 0) and each missed step shows in the LR.
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, factor=0.5, patience=0, threshold=0.5
        )
        scheduler: dict[str, Any] = {"scheduler": plateau, "frequency": self.frequency}
        if self.schedule == "plateau":
            scheduler["monitor"] = "val/loss"
        elif self.schedule == "plateau_step":
            # threshold 0: every lower batch loss is a new best the scheduler keeps, so a step
            # taken with another value than the uninterrupted run's shows in its state.
            plateau.threshold = 0.0
            scheduler.update(monitor="train/loss", interval="step")
        else:  # "step_lr": a plain per-epoch schedule, as in Lightning's own examples
            scheduler["scheduler"] = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


def loader(cls: type[DataLoader] = DataLoader) -> DataLoader:
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(32, 4, generator=g), torch.randint(0, 2, (32,), generator=g))
    return cls(data, batch_size=8)
