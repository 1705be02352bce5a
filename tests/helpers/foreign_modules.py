"""LightningModules written the way public projects write them, importing nothing from trainwell.

`HydraTemplateModule` is the lightning-hydra-template shape: the net, the optimizer / scheduler
partials and a compile flag as init arguments, all of them recorded by a bare
`save_hyperparameters(logger=False)` (so the checkpoint's hparams would hold an nn.Module and two
partials). `IgnoreNetModule` ignores only the net. `WidthsModule` takes a ListConfig and a
DictConfig from Hydra. `NoTestStepModule` has no test_step (a demo, a GAN).

Trained through scripts/train.py with the digits data and `HYDRA_TEMPLATE` overrides.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.demos.boring_classes import BoringDataModule
from torch import nn

# digits_cnn's net, optimizer and scheduler, handed to HydraTemplateModule (which takes no
# num_classes / label_smoothing of its own).
HYDRA_TEMPLATE = (
    "model._target_=tests.helpers.foreign_modules.HydraTemplateModule",
    "model.net.num_classes=10",
    "~model.num_classes",
    "~model.label_smoothing",
)


class HydraTemplateModule(L.LightningModule):
    HPARAMS_IGNORE: tuple[str, ...] = ()

    def __init__(
        self,
        net: nn.Module,
        optimizer: functools.partial,
        scheduler: functools.partial | None,
        compile: bool,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=list(self.HPARAMS_IGNORE))
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _step(self, batch: Any, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(1) == y).float().mean()
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True)
        self.log(f"{stage}/acc", acc, on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "test")

    def setup(self, stage: str) -> None:
        if self.hparams.compile and stage == "fit":
            self.net = torch.compile(self.net)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.hparams.optimizer(params=self.trainer.model.parameters())
        if self.hparams.scheduler is None:
            return {"optimizer": optimizer}
        scheduler = self.hparams.scheduler(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }


class ShardedTemplateModule(HydraTemplateModule):
    """The same under FSDP2, which leaves the sharding to the module: its net is sharded over
    the strategy's data-parallel mesh in `configure_model`."""

    def configure_model(self) -> None:
        from torch.distributed.fsdp import FSDPModule, fully_shard

        if not isinstance(self.net, FSDPModule):  # Lightning calls it again to test
            fully_shard(self.net, mesh=self.device_mesh["data_parallel"])


class IgnoreNetModule(HydraTemplateModule):
    """The same, with `save_hyperparameters(ignore=["net"])`: only the partials are objects."""

    HPARAMS_IGNORE = ("net",)


class WidthsModule(L.LightningModule):
    """An MLP on the 8x8 digits whose widths (a ListConfig) and SGD settings (a DictConfig) come
    straight from Hydra's instantiate."""

    def __init__(self, hidden: Any, optim: Any, num_classes: int = 10) -> None:
        super().__init__()
        self.save_hyperparameters()
        widths = [64, *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in itertools.pairwise(widths):
            layers += [nn.Linear(a, b), nn.Tanh()]
        self.net = nn.Sequential(*layers, nn.Linear(widths[-1], num_classes))

    def _step(self, batch: Any, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True)
        self.log(f"{stage}/acc", (logits.argmax(1) == y).float().mean(), on_epoch=True)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), **self.hparams.optim)


WIDTHS = (
    "~model",
    "+model._target_=tests.helpers.foreign_modules.WidthsModule",
    "+model.hidden=[32,16]",
    "+model.optim={lr:0.1,momentum:0.9}",
)


class NoTestStepModule(WidthsModule):
    """Trains and validates; defines no test_step."""

    test_step = L.LightningModule.test_step  # type: ignore[assignment]


NO_TEST_STEP = (
    "~model",
    "+model._target_=tests.helpers.foreign_modules.NoTestStepModule",
    "+model.hidden=[16]",
    "+model.optim={lr:0.1}",
)


class NoTestDataModule(BoringDataModule):
    """Lightning's BoringDataModule without a test split."""

    test_dataloader = L.LightningDataModule.test_dataloader  # type: ignore[assignment]


BORING = "lightning.pytorch.demos.boring_classes"
# Lightning's demo classes log no metric: nothing to monitor, no early stopping.
DEMO = (
    "~data",
    f"+data._target_={BORING}.BoringDataModule",
    "callbacks.early_stopping=null",
    "monitor.metric=null",
)
