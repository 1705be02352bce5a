"""The zoo: healthy modules and datamodules written the way users write them.

Plain `L.LightningModule` / `L.LightningDataModule` classes that import nothing from trainwell,
each with its own habits: tuple, list, dict and triple batches, masks, no validation split, an
iterable dataset, BatchNorm, GroupNorm, heavy dropout, tiny low-capacity nets, manual
optimization with its own accumulation, their own schedulers, and every way of logging. None
has a bug: the doctor must report no `fail` on any of them (tests/doctor/test_zoo.py).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset
from torchmetrics.classification import MulticlassAccuracy

# -- data -----------------------------------------------------------------------------------------


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    return x, torch.tensor(y, dtype=torch.long)


class DigitsTuples(L.LightningDataModule):
    """(image, label) tuples; the last 20% are validation."""

    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str | None = None) -> None:
        x, y = _digits()
        cut = int(0.8 * len(x))
        self.train = TensorDataset(x[:cut], y[:cut])
        self.val = TensorDataset(x[cut:], y[cut:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=64)


class _Dicts(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        # a pixel mask (which pixels are inked) travels with every sample
        return {"image": self.x[i], "label": self.y[i], "mask": self.x[i] > 0}


class DigitsDicts(DigitsTuples):
    """Dict samples {"image", "label", "mask"}: default_collate makes dict batches."""

    def setup(self, stage: str | None = None) -> None:
        x, y = _digits()
        cut = int(0.8 * len(x))
        self.train, self.val = _Dicts(x[:cut], y[:cut]), _Dicts(x[cut:], y[cut:])


class _Triples(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> list[Any]:
        return [self.x[i], self.y[i], i]  # with the sample's index, as many users keep


class DigitsTriples(DigitsTuples):
    def setup(self, stage: str | None = None) -> None:
        x, y = _digits()
        cut = int(0.8 * len(x))
        self.train, self.val = _Triples(x[:cut], y[:cut]), _Triples(x[cut:], y[cut:])


class DigitsTrainOnly(DigitsTuples):
    """No validation split at all (no val_dataloader)."""

    def setup(self, stage: str | None = None) -> None:
        x, y = _digits()
        self.train = TensorDataset(x, y)

    val_dataloader = L.LightningDataModule.val_dataloader  # not defined, as in the base class


class _Stream(IterableDataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __iter__(self) -> Any:
        order = torch.randperm(len(self.x))  # the run's seeded global RNG: new every epoch
        for i in order.tolist():
            yield self.x[i], self.y[i]


class DigitsStream(DigitsTuples):
    """An iterable dataset: no indices, no length."""

    def setup(self, stage: str | None = None) -> None:
        x, y = _digits()
        cut = int(0.8 * len(x))
        self.train = _Stream(x[:cut], y[:cut])
        self.val = TensorDataset(x[cut:], y[cut:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size)


class Sentences(L.LightningDataModule):
    """Variable-length token sequences of a tiny grammar, padded per batch with its own collate."""

    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        seen: set[tuple[int, ...]] = set()
        while len(seen) < 600:  # distinct sequences: none can be in both splits
            n = int(torch.randint(6, 20, (1,), generator=g))
            steps = 1 + (torch.rand(n, generator=g) < 0.3).long()  # a walk of +1 / +2 steps
            seen.add(tuple((steps.cumsum(0) % 9 + 1).tolist()))
        seqs = [torch.tensor(s) for s in sorted(seen)]
        order = torch.randperm(len(seqs), generator=g).tolist()
        seqs = [seqs[i] for i in order]
        self.train, self.val = seqs[:500], seqs[500:]

    @staticmethod
    def collate(seqs: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        width = max(len(s) for s in seqs) - 1
        inputs = torch.zeros(len(seqs), width, dtype=torch.long)
        labels = torch.full((len(seqs), width), -100)
        for i, s in enumerate(seqs):
            inputs[i, : len(s) - 1] = s[:-1]
            labels[i, : len(s) - 1] = s[1:]
        return {"input_ids": inputs, "labels": labels}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, self.batch_size, shuffle=True, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, self.batch_size, collate_fn=self.collate)


# -- modules --------------------------------------------------------------------------------------


class _Classifier(L.LightningModule):
    """Shared plumbing; each zoo module writes its own steps and logging."""

    lr = 1e-2

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class LogisticRegression(_Classifier):
    """A linear model, plain SGD with a small LR: a slow learner. Logs on step only."""

    lr = 0.05

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 10)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.linear(x.flatten(1)), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.linear(x.flatten(1)), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Bottleneck(_Classifier):
    """One hidden unit: it cannot memorise 32 digits, however long it trains. log_dict."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 1), nn.Tanh(), nn.Linear(1, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(1) == y).float().mean()
        self.log_dict({"loss": loss, "acc": acc}, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.cross_entropy(self.net(x), y), on_epoch=True)


class BatchNormCNN(_Classifier):
    """BatchNorm + dropout; accuracy as a torchmetrics object, logged per epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Dropout(0.2)
        )
        self.head = nn.Linear(16 * 64, 10)
        self.val_acc = MulticlassAccuracy(10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train/loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.val_acc.update(self(x), y)
        self.log("val/acc", self.val_acc, on_epoch=True)


class PooledCNN(_Classifier):
    """Conv, ReLU and max pooling twice, He-initialised with zero biases as CNN tutorials do: on
    the digits' blank background a fresh net's ReLUs sit exactly at their kink (0 + a zero bias)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * 4, 10),
        )
        for m in self.net:
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))


class GroupNormCNN(_Classifier):
    """GroupNorm (batch-size independent); validation accuracy computed at epoch end from a
    torchmetrics metric and logged as a number."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.GroupNorm(4, 16),
            nn.GELU(),
            nn.Flatten(),
            nn.Linear(16 * 64, 10),
        )
        self.acc = MulticlassAccuracy(10)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.acc.update(self.net(x), y)

    def on_validation_epoch_end(self) -> None:
        self.log("val_acc", self.acc.compute(), sync_dist=True)
        self.acc.reset()


class HeavyDropoutMLP(_Classifier):
    """Dropout 0.5 and a dict returned from training_step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10)
        )

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        return {"loss": F.cross_entropy(self.net(x), y)}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("hp_metric", F.cross_entropy(self.net(x), y), prog_bar=True)


class MaskedDictModel(_Classifier):
    """Dict batches with a mask: the masked image and the mask go in, logits come out."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(128, 64), nn.SiLU())
        self.classifier = nn.Linear(64, 10)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        both = torch.cat([batch["image"] * batch["mask"], batch["mask"].float()], dim=1)
        return self.classifier(self.encoder(both))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch), batch["label"])
        self.log("loss/train", loss, batch_size=len(batch["label"]))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss = F.cross_entropy(self(batch), batch["label"])
        self.log("loss/val", loss, batch_size=len(batch["label"]))


class TripleBatchModel(_Classifier):
    """(x, y, index) list batches; nothing logged at all."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch: list[Any], batch_idx: int) -> None:
        x, y, _ = batch
        F.cross_entropy(self.net(x), y)


class TrainOnlyModel(_Classifier):
    """No validation_step (its datamodule has no val split)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, on_step=True, on_epoch=True)
        return loss


class ManualAccumulation(_Classifier):
    """Manual optimization with its own accumulation over 2 micro-batches, done right."""

    accumulate = 2

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.manual_backward(loss / self.accumulate)
        if (batch_idx + 1) % self.accumulate == 0:
            opt.step()
            opt.zero_grad()
        self.log("train_loss", loss, prog_bar=True)
        return loss.detach()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))


class WarmupScheduled(_Classifier):
    """Its own linear-warmup scheduler (starting at LR ~0), stepped per optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=3e-3)
        warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 1000))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}


class StreamModel(TripleBatchModel):
    """For the iterable dataset: (x, y) tuples."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))


class TokenGRU(L.LightningModule):
    """A user's own language model: dict batches with -100 padding, token count declared, the
    logged loss weighted by tokens (batch_size=)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 32)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.out = nn.Linear(64, 10)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(ids))[0])

    def loss_items(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return (batch["labels"] != -100).sum()

    def _loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        logits = self(batch["input_ids"])
        loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
        return loss, int((batch["labels"] != -100).sum())

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, tokens = self._loss(batch)
        self.log("train/loss", loss, on_epoch=True, batch_size=tokens)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss, tokens = self._loss(batch)
        self.log("val/loss", loss, batch_size=tokens)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class _Images(Dataset):
    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i]


class DigitsImagesOnly(DigitsTuples):
    """Bare tensor batches: images, no labels (self-supervised)."""

    def setup(self, stage: str | None = None) -> None:
        x, _ = _digits()
        cut = int(0.8 * len(x))
        self.train, self.val = _Images(x[:cut]), _Images(x[cut:])


class AutoEncoder(_Classifier):
    """Reconstructs its input: MSE against the batch itself, logged per epoch with sync_dist."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh())
        self.decode = nn.Linear(16, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x)).view_as(x)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = F.mse_loss(self(batch), batch)
        self.log("train/recon", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val/recon", F.mse_loss(self(batch), batch), sync_dist=True)


# -- legitimate Lightning patterns the doctor once failed ------------------------------------------


class EpochStepLR(_Classifier):
    """StepLR returned as `[optimizer], [scheduler]`: Lightning's default interval, per epoch
    (as Lightning's own BoringModel does)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)]


class PlateauScheduled(EpochStepLR):
    """Optimizer and scheduler from the config's `_partial_`s, as the template's convention
    hands them in; the scheduler is ReduceLROnPlateau on a logged validation metric."""

    def __init__(self, optimizer: Any, scheduler: Any) -> None:
        super().__init__()
        self.make_optimizer, self.make_scheduler = optimizer, scheduler

    def configure_optimizers(self) -> Any:
        opt = self.make_optimizer(params=self.parameters())
        plateau = self.make_scheduler(optimizer=opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}


class GAN(L.LightningModule):
    """Manual optimization with two optimizers, the way Lightning's GAN example steps them:
    toggle, zero_grad right before its own backward, step, untoggle."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 64), nn.Sigmoid())
        self.discriminator = nn.Sequential(nn.Linear(64, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))

    def training_step(self, batch: Any, batch_idx: int) -> None:
        real = batch[0].flatten(1)
        opt_g, opt_d = self.optimizers()
        z = torch.randn(len(real), 8, device=real.device)
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)

        self.toggle_optimizer(opt_g)
        fake = self.generator(z)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        d_loss = (
            F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
            + F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros)
        ) / 2
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def configure_optimizers(self) -> Any:
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        return [opt_g, opt_d]


class KeepsLastLoss(_Classifier):
    """Keeps the latest step's loss and predicted probabilities (graphs included) for a
    callback to look at: one step's graph stays alive, replaced every step, never growing."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        self.last_loss: torch.Tensor | None = None
        self.last_probs: torch.Tensor | None = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        self.last_loss, self.last_probs = loss, logits.softmax(dim=1)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))


class SkipsABatch(TripleBatchModel):
    """Returns None for one batch, Lightning's documented way to skip it."""

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor | None:
        if batch_idx == 1:
            return None
        return super().training_step(batch, batch_idx)


class DigitsOneNaturalDuplicate(DigitsTuples):
    """A small generated validation split of 47 samples, one of which happens to equal a train
    sample (natural duplicates occur in real data sets)."""

    def setup(self, stage: str | None = None) -> None:
        x, y = _digits()
        self.train = TensorDataset(x[:1200], y[:1200])
        val_x, val_y = x[1200:1247].clone(), y[1200:1247].clone()
        val_x[5], val_y[5] = x[17], y[17]
        self.val = TensorDataset(val_x, val_y)


class _Pairs(Dataset):
    """Unlabelled (noise, image) pairs for the GAN: the image is what is learnt."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor]:
        return (self.x[i],)


class DigitsImagesForGAN(DigitsTuples):
    def setup(self, stage: str | None = None) -> None:
        x, _ = _digits()
        self.train = _Pairs(x[:1400])

    val_dataloader = L.LightningDataModule.val_dataloader


class TwoBackwardsOneGraph(_Classifier):
    """Manual optimization: two losses over one shared trunk, backpropagated one after the
    other (retain_graph=True for the first, so the second can reuse the graph)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.trunk = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh())
        self.head = nn.Linear(32, 10)
        self.parity = nn.Linear(32, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        opt = self.optimizers()
        features = self.trunk(x)
        main = F.cross_entropy(self.head(features), y)
        aux = F.cross_entropy(self.parity(features), y % 2)
        opt.zero_grad()
        self.manual_backward(main, retain_graph=True)
        self.manual_backward(0.5 * aux)
        opt.step()
        return main.detach()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.head(self.trunk(x)), y))


class LocalWikiText2(L.LightningDataModule):
    """Lightning's demo WikiText2 dataset read from a local file (`data_dir`/wikitext-2.txt,
    written by the test: the demo downloads otherwise); the last 10% of blocks validate."""

    def __init__(self, data_dir: str = "data", batch_size: int = 16) -> None:
        super().__init__()
        self.data_dir, self.batch_size = data_dir, batch_size

    def setup(self, stage: str | None = None) -> None:
        from pathlib import Path

        from lightning.pytorch.demos.transformer import WikiText2

        text = WikiText2(data_dir=Path(self.data_dir), download=False)
        cut = int(0.9 * len(text))
        self.train = torch.utils.data.Subset(text, range(cut))
        self.val = torch.utils.data.Subset(text, range(cut, len(text)))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size)


def write_wikitext(directory: Any, words: int = 6000, seed: int = 0) -> int:
    """A small English-like text in the demo's file layout; returns its vocabulary size (the
    demo's tokenizer adds one `<eos>` per line)."""
    from pathlib import Path

    g = torch.Generator().manual_seed(seed)
    vocab = [f"w{i}" for i in range(60)]
    lines, line = [], []
    for _ in range(words):
        line.append(vocab[int(torch.randint(len(vocab), (1,), generator=g))])
        if len(line) == 12:
            lines.append(" ".join(line))
            line = []
    path = Path(directory) / "wikitext-2.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return len({w for text in lines for w in text.split()}) + 1
