"""LightningModules in the shapes public Lightning code takes (no trainwell imports).

Each class is one pattern users arrive with; `tests/ecosystem/cases.py` says which data and
overrides train it. Inputs are the 8-feature, 3-class blobs of `tests/ecosystem/data.py`.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MaxMetric, MeanMetric, MetricCollection
from torchmetrics.classification import Accuracy, F1Score, MulticlassAccuracy

FEATURES, CLASSES = 8, 3


class MLP(nn.Module):
    """A plain net, built by Hydra and handed to a LightningModule."""

    def __init__(self, in_features: int = FEATURES, hidden: int = 16, out: int = CLASSES) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, out)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class HydraTemplateLike(L.LightningModule):
    """The lightning-hydra-template shape: net and optimizer / scheduler partials from the config,
    every init argument recorded by `save_hyperparameters(logger=False)`, torchmetrics for
    accuracy, loss means and the best validation accuracy so far."""

    def __init__(
        self,
        net: nn.Module,
        optimizer: functools.partial,
        scheduler: functools.partial | None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.net = net
        self.criterion = nn.CrossEntropyLoss()
        self.train_acc = Accuracy(task="multiclass", num_classes=CLASSES)
        self.val_acc = Accuracy(task="multiclass", num_classes=CLASSES)
        self.test_acc = Accuracy(task="multiclass", num_classes=CLASSES)
        self.train_loss, self.val_loss, self.test_loss = MeanMetric(), MeanMetric(), MeanMetric()
        self.val_acc_best = MaxMetric()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def on_train_start(self) -> None:
        # Lightning's sanity check ran validation: its results must not count.
        self.val_loss.reset()
        self.val_acc.reset()
        self.val_acc_best.reset()

    def model_step(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self(x)
        return self.criterion(logits, y), logits.argmax(dim=1), y

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, preds, targets = self.model_step(batch)
        self.train_loss(loss)
        self.train_acc(preds, targets)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.val_loss(loss)
        self.val_acc(preds, targets)
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        self.val_acc_best(self.val_acc.compute())
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.test_loss(loss)
        self.test_acc(preds, targets)
        self.log("test/loss", self.test_loss, on_step=False, on_epoch=True)
        self.log("test/acc", self.test_acc, on_step=False, on_epoch=True)

    def setup(self, stage: str) -> None:
        if self.hparams.compile and stage == "fit":
            self.net = torch.compile(self.net)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.hparams.optimizer(params=self.parameters())
        if self.hparams.scheduler is None:
            return {"optimizer": optimizer}
        scheduler = self.hparams.scheduler(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {
                "scheduler": scheduler,
                "monitor": "val/loss",
                "interval": "epoch",
                "frequency": 1,
            },
        }


class SimpleClassifier(L.LightningModule):
    """A minimal classifier the scheduler / logging variants below build on: its own net, loss
    means logged per epoch, an SGD optimizer with momentum and no schedule."""

    def __init__(self, hidden: int = 16, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = MLP(hidden=hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss_and_acc(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits, y), (logits.argmax(1) == y).float().mean()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        loss, _ = self.loss_and_acc(batch)
        self.log("train/loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, acc = self.loss_and_acc(batch)
        self.log_dict({"val/loss": loss, "val/acc": acc})

    def test_step(self, batch: Any, batch_idx: int) -> None:
        loss, acc = self.loss_and_acc(batch)
        self.log_dict({"test/loss": loss, "test/acc": acc})

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class PlateauClassifier(SimpleClassifier):
    """ReduceLROnPlateau on the validation loss (patience 0: it really cuts the LR here)."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": plateau, "monitor": "val/loss"},
        }


class StepLRClassifier(SimpleClassifier):
    """The list form `[optimizer], [scheduler]`: StepLR stepping once per epoch (the default)."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr / 10)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


class OneCycleClassifier(SimpleClassifier):
    """OneCycleLR per optimizer step, its length read from the trainer."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        cycle = torch.optim.lr_scheduler.OneCycleLR(
            optimizer,
            max_lr=self.hparams.lr,
            total_steps=int(self.trainer.estimated_stepping_batches),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": cycle, "interval": "step"}}


class TrainOnly(L.LightningModule):
    """No validation_step, no test_step: only training (a pretraining script, a demo)."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.lr = lr
        self.net = MLP()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class StepAndEpochLogging(SimpleClassifier):
    """Loss tensors logged per step and per epoch, on the progress bar."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, acc = self.loss_and_acc(batch)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        self.log("train/acc", acc, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, acc = self.loss_and_acc(batch)
        self.log("val/loss", loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", acc, on_step=False, on_epoch=True, prog_bar=True)


class CollectionClassifier(SimpleClassifier):
    """A torchmetrics MetricCollection per stage, cloned with a prefix and logged with log_dict."""

    def __init__(self, hidden: int = 16, lr: float = 0.1) -> None:
        super().__init__(hidden, lr)
        metrics = MetricCollection(
            {
                "acc": MulticlassAccuracy(num_classes=CLASSES, average="micro"),
                "f1": F1Score(task="multiclass", num_classes=CLASSES, average="macro"),
            }
        )
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")

    def _shared(self, batch: Any, metrics: MetricCollection, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        metrics.update(logits, y)
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True)
        self.log_dict(metrics, on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._shared(batch, self.train_metrics, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._shared(batch, self.val_metrics, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._shared(batch, self.test_metrics, "test")


class TwoValLoaders(SimpleClassifier):
    """Validation over several loaders: Lightning suffixes each metric with its loader index."""

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        loss, acc = self.loss_and_acc(batch)
        self.log_dict({"val/loss": loss, "val/acc": acc})


class WithPredict(SimpleClassifier):
    """predict_step returning class probabilities (and the labels it was given)."""

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        x, y = batch
        return {"probs": self(x).softmax(dim=1), "label": y}


class SkipsABatch(SimpleClassifier):
    """training_step returns None for one batch per epoch: Lightning skips its backward and step."""

    skip_batch = 2

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        if batch_idx == self.skip_batch:
            return None
        return super().training_step(batch, batch_idx)


class BatchNormNet(SimpleClassifier):
    """An MLP with BatchNorm1d: trained with accumulation, BN sees micro-batches only."""

    def __init__(self, hidden: int = 16, lr: float = 0.1) -> None:
        super().__init__(hidden, lr)
        self.net = nn.Sequential(
            nn.Linear(FEATURES, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, CLASSES),
        )


class ContainerArgs(L.LightningModule):
    """Lists and dicts straight from the Hydra config (ListConfig / DictConfig at runtime),
    recorded by a bare `save_hyperparameters()`."""

    def __init__(
        self, hidden_sizes: list[int], loss_weights: dict[str, float], lr: float = 0.05
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        sizes = [FEATURES, *hidden_sizes]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(sizes):
            layers += [nn.Linear(a, b), nn.Tanh()]
        self.net = nn.Sequential(*layers, nn.Linear(sizes[-1], CLASSES))

    def _loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self.net(x)
        w = self.hparams.loss_weights
        loss = w["ce"] * F.cross_entropy(logits, y) + w["l2"] * logits.pow(2).mean()
        return loss, (logits.argmax(1) == y).float().mean()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, _ = self._loss(batch)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, acc = self._loss(batch)
        self.log_dict({"val/loss": loss, "val/acc": acc})

    def test_step(self, batch: Any, batch_idx: int) -> None:
        loss, acc = self._loss(batch)
        self.log_dict({"test/loss": loss, "test/acc": acc})

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


class DictBatchClassifier(SimpleClassifier):
    """Batches are dicts: the module picks its inputs and labels by key."""

    def loss_and_acc(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return super().loss_and_acc((batch["features"], batch["label"]))


class TinyGAN(L.LightningModule):
    """A GAN on the 8-feature blobs: two optimizers stepped by hand. Each optimizer is toggled,
    zeroed right before its own backward, stepped and untoggled. No validation or test step."""

    def __init__(self, latent: int = 4, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(latent, 16), nn.ReLU(), nn.Linear(16, FEATURES))
        self.discriminator = nn.Sequential(
            nn.Linear(FEATURES, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1)
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        real, _ = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.shape[0], self.hparams.latent, device=self.device)
        ones = torch.ones(real.shape[0], 1, device=self.device)
        zeros = torch.zeros_like(ones)

        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(z)), ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        fake = self(z).detach()
        d_loss = 0.5 * (
            F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
            + F.binary_cross_entropy_with_logits(self.discriminator(fake), zeros)
        )
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"train/g_loss": g_loss, "train/d_loss": d_loss}, prog_bar=True)

    def configure_optimizers(self) -> Any:
        lr = self.hparams.lr
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(0.5, 0.999))
        return [opt_g, opt_d], []


class BranchingClassifier(SimpleClassifier):
    """forward branches on the data (a Python `if` on a tensor value), as hand-written research
    code does: it trains and predicts, but no graph can hold the branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 0:
            return self.net(x)
        return self.net(-x)


class TinyTokenModel(L.LightningModule):
    """A next-token model over (tokens, targets) batches: forward gives (N, T, vocab) scores."""

    def __init__(self, vocab: int = 12, width: int = 16, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.embed(tokens)))

    def step(self, batch: Any) -> torch.Tensor:
        tokens, targets = batch
        return F.cross_entropy(self(tokens).flatten(0, 1), targets.flatten())

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.step(batch)
        self.log("train/loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/loss", self.step(batch))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test/loss", self.step(batch))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
