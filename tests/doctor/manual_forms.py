"""Manual optimization as people write it: healthy modules the doctor must finish on, in its
usual time, without a `fail`.

Each steps its optimizer(s) its own way: every 4 or 16 micro-batches counted with `batch_idx`, two
optimizers taking turns, on a condition (a sample count reached, the last batch of an epoch),
through a closure, and a `training_step` that returns None. Plain Lightning: nothing here imports
trainwell (tests/doctor/test_manual_forms.py runs each under bare Lightning too).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))


class _Manual(L.LightningModule):
    lr = 1e-2

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.net = _mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class EveryFourBatches(_Manual):
    """Accumulates 4 micro-batches, counted with batch_idx (restarts every epoch)."""

    accumulate = 4

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.manual_backward(loss / self.accumulate)
        if (batch_idx + 1) % self.accumulate == 0:
            opt.step()
            opt.zero_grad()
        self.log("train_loss", loss)
        return loss.detach()


class EverySixteenBatches(EveryFourBatches):
    """Accumulates 16 micro-batches: more than some probes watch for a step."""

    accumulate = 16


class TwoOptimizersTakingTurns(_Manual):
    """The body and the head each have an optimizer; even batches step one, odd the other."""

    def training_step(self, batch: Any, batch_idx: int) -> None:
        body, head = self.optimizers()
        opt = body if batch_idx % 2 == 0 else head
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.log("train_loss", loss)

    def configure_optimizers(self) -> Any:
        return [
            torch.optim.SGD(self.net[1].parameters(), lr=0.1),
            torch.optim.Adam(self.net[3].parameters(), lr=self.lr),
        ]


class StepsOnSampleCount(_Manual):
    """Steps once 96 samples have been accumulated, counted in an attribute across batches and
    epochs: the window follows the data, not the batch index."""

    window = 96

    def __init__(self) -> None:
        super().__init__()
        self.pending = 0

    # The count decides when the next step comes: a resumed run must have it too.
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["pending_samples"] = self.pending

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.pending = checkpoint["pending_samples"]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y, reduction="sum") / self.window
        self.manual_backward(loss)
        self.pending += len(y)
        if self.pending >= self.window:
            opt.step()
            opt.zero_grad()
            self.pending = 0
        return loss.detach()


class StepsAtEpochEnd(_Manual):
    """Full-batch gradient descent: every micro-batch of the epoch adds its share to the
    gradient and the optimizer steps once, on the epoch's last batch."""

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.manual_backward(loss / self.trainer.num_training_batches)
        if self.trainer.is_last_batch:
            opt.step()
            opt.zero_grad()
        self.log("train_loss", loss)


class Closure(_Manual):
    """L-BFGS, which calls the closure (zero_grad, loss, backward) as often as it needs."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        x, y = batch

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = F.cross_entropy(self(x), y)
            self.manual_backward(loss)
            return loss

        loss = opt.step(closure=closure)
        self.log("train_loss", loss)
        return loss.detach()

    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=4)


class ReturnsNone(_Manual):
    """Steps every micro-batch and returns nothing, as Lightning's manual-optimization docs do."""

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.log("train_loss", loss)


FORMS = (
    EveryFourBatches,
    EverySixteenBatches,
    TwoOptimizersTakingTurns,
    StepsOnSampleCount,
    StepsAtEpochEnd,
    Closure,
    ReturnsNone,
)
