"""The bug museum: small, deliberately broken nets, tasks and datamodules.

Each exhibit carries exactly one planted bug; tests/doctor/test_museum.py swaps it into the
shipped digits experiment through a Hydra `_target_` override and asserts the check that must
catch it. The language-model exhibits are in museum_tokens.py (they need that example).
"""

from __future__ import annotations

import time

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset, WeightedRandomSampler

from project.data.digits import DigitsDataModule
from project.models.digits_cnn import DigitsCNN
from project.tasks.classification import ClassificationTask

# -- nets -------------------------------------------------------------------------------------


class SoftmaxNet(DigitsCNN):
    """Returns probabilities: CrossEntropy applies log_softmax on top (squashed gradients)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).softmax(dim=1)


class LogSoftmaxNet(DigitsCNN):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(super().forward(x), dim=1)


class PlainListNet(nn.Module):
    """Hidden layers in a Python list: invisible to parameters(), the optimizer, .to()."""

    def __init__(self, num_classes: int = 10, width: int = 8, dropout: float = 0.0) -> None:
        super().__init__()
        self.stem = nn.Flatten()
        self.blocks = [nn.Linear(64, 32), nn.Linear(32, 32)]
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


class NoGradFeaturesNet(DigitsCNN):
    """torch.no_grad() around the feature extractor: only the head ever learns."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            features = self.features(x)
        return self.head(features)


class DetachNet(DigitsCNN):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).detach())


class EvalBatchNormNet(DigitsCNN):
    """Left in eval mode after construction (Lightning preserves the mode it finds)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.eval()


class ClassIdRegressor(DigitsCNN):
    """One output: the class id as a number (for MSE on class ids)."""

    def __init__(self, num_classes: int = 10, width: int = 8, dropout: float = 0.0) -> None:
        super().__init__(num_classes=1, width=width, dropout=dropout)


# -- tasks ------------------------------------------------------------------------------------


class FreezeAfterOptimizerTask(ClassificationTask):
    """Builds the optimizer, then freezes the backbone: frozen tensors stay in the optimizer."""

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(params=self.parameters())
        for p in self.net.features.parameters():
            p.requires_grad = False
        return optimizer


class LateHeadTask(ClassificationTask):
    """Adds a layer after the optimizer exists (in on_train_start): it never trains."""

    def on_train_start(self) -> None:
        self.extra_head = nn.Linear(self.hparams.num_classes, self.hparams.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.net(x)
        extra = getattr(self, "extra_head", None)
        return logits if extra is None else extra(logits)


class OneHotTargetsTask(ClassificationTask):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.criterion(self(x), F.one_hot(y, self.hparams.num_classes).float())


class MSEOnClassIdsTask(ClassificationTask):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x).squeeze(1), y.float())

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", F.mse_loss(self(x).squeeze(1), y.float()))


class NoZeroGradTask(ClassificationTask):
    """Overrides optimizer_zero_grad with nothing: gradients sum over all steps."""

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer) -> None:
        pass


class TrainInValidationTask(ClassificationTask):
    """Custom validation code that calls self.train(): dropout is active while validating."""

    def validation_step(self, batch, batch_idx):
        self.train()
        return super().validation_step(batch, batch_idx)


class BatchNormTrainInValidationTask(ClassificationTask):
    """Custom validation code that puts BatchNorm back in train mode (no dropout anywhere): each
    batch is normalised with its own statistics, so a batch repeated gives the same outputs and
    only the modes show the bug."""

    def validation_step(self, batch, batch_idx):
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.train()
        return super().validation_step(batch, batch_idx)


class LossHistoryTask(ClassificationTask):
    """Appends the loss tensor (with its graph) instead of loss.item()."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.history: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.history.append(loss)
        return loss


class RetainGraphTask(ClassificationTask):
    def backward(self, loss: torch.Tensor, *args, **kwargs) -> None:
        loss.backward(retain_graph=True)


class MicroBatchSchedulerTask(ClassificationTask):
    """Steps the scheduler by hand in every micro-batch: under accumulation it runs K x fast."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.lr_schedulers().step()
        return loss


class UnnormalisedAccumulationTask(ClassificationTask):
    """'Undoes' Lightning's division by K: the window's gradient is K x too large."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        return loss * self.trainer.accumulate_grad_batches


class UnsavedStateTask(ClassificationTask):
    """A plain tensor attribute that changes during training: the checkpoint never sees it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.temperature = torch.tensor(1.0)

    def training_step(self, batch, batch_idx):
        self.temperature = self.temperature + 0.01
        return super().training_step(batch, batch_idx)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) / self.temperature


class SchedulerStateDroppedTask(ClassificationTask):
    """Scheduler states emptied from every checkpoint it writes (to keep it small): a resumed
    run restarts its warm-up and decay from the first step."""

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["lr_schedulers"] = []


class EvalCalibrationTask(ClassificationTask):
    """A calibration kept as a plain tensor attribute, updated in training and applied only when
    evaluating: the checkpoint never sees it, training steps never use it, and only evaluation
    outputs show it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calibration = torch.tensor(1.0)

    def training_step(self, batch, batch_idx):
        self.calibration = self.calibration + 0.01
        return super().training_step(batch, batch_idx)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net(x)
        return out if self.training else out / self.calibration


# -- datamodules ------------------------------------------------------------------------------


class NaNDigits(DigitsDataModule):
    """One train sample is NaN (a corrupt record)."""

    def setup(self, stage=None):
        if self.train_set is not None:
            return
        super().setup(stage)
        x, y = self.train_set.tensors
        x = x.clone()
        x[100, 0, 3, 3] = float("nan")
        self.train_set = TensorDataset(x, y)


class MajorityDigits(DigitsDataModule):
    """Class 0 is 99% of the training split (its samples repeated ten times, one sample of
    every other class left): a short fit learns to answer class 0 for everything."""

    def setup(self, stage=None):
        if self.train_set is not None:
            return
        super().setup(stage)
        x, y = self.train_set.tensors
        zeros = torch.nonzero(y == 0).reshape(-1).repeat(10)
        others = torch.stack([torch.nonzero(y == c).reshape(-1)[0] for c in range(1, 10)])
        keep = torch.cat([zeros, others])
        self.train_set = TensorDataset(x[keep].clone(), y[keep].clone())


class SelfBalancedDigits(DigitsDataModule):
    """The imbalanced digits, rebalanced by the datamodule's own loader as people write it: a
    WeightedRandomSampler with one weight per sample, 1 / the count of its class."""

    def sample_weights(self, labels: torch.Tensor) -> torch.Tensor:
        return (1.0 / torch.bincount(labels).double())[labels]

    def train_dataloader(self) -> DataLoader:
        labels = self.train_set.tensors[1]
        sampler = WeightedRandomSampler(
            self.sample_weights(labels), num_samples=len(labels), replacement=True,
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler)


class PerClassWeightsDigits(SelfBalancedDigits):
    """The reported mistake: one weight per class handed over as if per sample, so the sampler
    draws only the first ten samples of the training split."""

    def sample_weights(self, labels: torch.Tensor) -> torch.Tensor:
        return 1.0 / torch.bincount(labels).double()


class OverlappingDigits(DigitsDataModule):
    """Validation drawn from the training samples."""

    def setup(self, stage=None):
        if self.train_set is not None:
            return
        super().setup(stage)
        x, y = self.train_set.tensors
        self.val_set = TensorDataset(x[:50].clone(), y[:50].clone())


class _SameRngNoise(Dataset):
    """Noise augmentation from a numpy Generator made in __init__: each worker gets a copy."""

    def __init__(self, base: Dataset) -> None:
        self.base = base
        self.rng = np.random.default_rng(0)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        x, y = self.base[i]
        noise = torch.from_numpy(self.rng.normal(size=tuple(x.shape)).astype(np.float32))
        return x + 0.1 * noise, y


class SameAugmentationDigits(DigitsDataModule):
    def setup(self, stage=None):
        if self.train_set is not None:
            return
        super().setup(stage)
        self.train_set = _SameRngNoise(self.train_set)


class _Slow(Dataset):
    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        time.sleep(0.002)  # a disk read per sample
        return self.base[i]


class SlowDigits(DigitsDataModule):
    def setup(self, stage=None):
        if self.train_set is not None:
            return
        super().setup(stage)
        self.train_set = _Slow(self.train_set)


# -- healthy counterparts (the exhibit's check must pass on them) --------------------------------


class _BusyMachine(Dataset):
    """A fast loader on a machine that is busy for a while: every fetch is held up while `busy`
    (another process holding the cores), as data.throughput's first measurement may be."""

    busy = False

    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        if _BusyMachine.busy:
            time.sleep(0.002)
        return self.base[i]


class BusyMachineDigits(DigitsDataModule):
    def setup(self, stage=None):
        if self.train_set is not None:
            return
        super().setup(stage)
        self.train_set = _BusyMachine(self.train_set)


class _MostlyBusyMachine(Dataset):
    """A fast loader on a machine busy through every measurement, but not all the time: two
    batches of every three are held up (another process holding the cores while they are
    fetched), in every measurement data.throughput takes."""

    def __init__(self, base: Dataset) -> None:
        self.base, self.batches = base, 0

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        return self.base[i]

    def __getitems__(self, indices: list[int]) -> list:
        # the DataLoader fetches a batch's samples in one call: the hold-ups follow batches
        self.batches += 1
        if self.batches % 3:
            time.sleep(0.002 * len(indices))
        return [self.base[i] for i in indices]


class MostlyBusyMachineDigits(DigitsDataModule):
    def setup(self, stage=None):
        if self.train_set is not None:
            return
        super().setup(stage)
        self.train_set = _MostlyBusyMachine(self.train_set)


class _TorchNoise(_SameRngNoise):
    """The same augmentation drawn from a generator seeded by the sample's index: the same in
    any worker, with any number of workers (the global RNG would make it depend on them)."""

    def __getitem__(self, i: int):
        x, y = self.base[i]
        return x + 0.1 * torch.randn(x.shape, generator=torch.Generator().manual_seed(i)), y


class TorchAugmentationDigits(DigitsDataModule):
    def setup(self, stage=None):
        if self.train_set is not None:
            return
        super().setup(stage)
        self.train_set = _TorchNoise(self.train_set)


class HandNormalisedAccumulationTask(ClassificationTask):
    """Divides by K itself, as plain-PyTorch loops do: with Lightning (and the template) also
    normalising, every step is K x too small."""

    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) / self.trainer.accumulate_grad_batches


class NoGradForwardNet(DigitsCNN):
    """The whole forward under no_grad: backward has no graph at all (the first step raises)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return super().forward(x)


# -- manual optimization --------------------------------------------------------------------------


class ManualAccumulationTask(ClassificationTask):
    """Manual optimization accumulating 2 micro-batches per step, each loss divided by 2."""

    accumulate = 2
    divide = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self._shared_step(batch)[0]
        self.manual_backward(loss / self.accumulate if self.divide else loss)
        if (batch_idx + 1) % self.accumulate == 0:
            opt.step()
            opt.zero_grad()
            scheduler = self.lr_schedulers()
            if scheduler is not None:
                scheduler.step()
        return loss.detach()


class ManualSummedAccumulationTask(ManualAccumulationTask):
    """The same loop without the division: every step applies the sum of 2 micro-batch means."""

    divide = False


# -- logging that ranks or batches weigh wrongly ---------------------------------------------------


class EpochEndMeanTask(ClassificationTask):
    """Averages its validation losses itself and logs the mean from on_validation_epoch_end
    with sync_dist=True: on W ranks Lightning averages the ranks' means unweighted."""

    def on_validation_epoch_start(self) -> None:
        self.val_losses: list[torch.Tensor] = []

    def validation_step(self, batch, batch_idx):
        super().validation_step(batch, batch_idx)
        self.val_losses.append(self._shared_step(batch)[0])

    def on_validation_epoch_end(self) -> None:
        self.log("val/mean_loss", torch.stack(self.val_losses).mean(), sync_dist=True)
        super().on_validation_epoch_end()


class SummedLossTask(ClassificationTask):
    """The loss summed over samples (reduction='sum'): it grows with the batch, so K
    micro-batches can never give one batch's gradient."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.criterion = nn.CrossEntropyLoss(reduction="sum")


class HardCodedOneCycleTask(ClassificationTask):
    """OneCycleLR sized by hand for 10 steps, far fewer than the run takes."""

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": cycle, "interval": "step"}}


class GANWithoutZeroGrad(L.LightningModule):
    """The two-optimizer manual loop of a GAN, but the generator never clears its gradients."""

    def __init__(self, **_: object) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(8, 64), nn.Sigmoid())
        self.discriminator = nn.Linear(64, 1)

    def training_step(self, batch, batch_idx):
        real = batch[0].flatten(1)
        opt_g, opt_d = self.optimizers()
        fake = self.generator(torch.randn(len(real), 8))
        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(
            self.discriminator(fake), torch.ones(len(real), 1)
        )
        self.manual_backward(g_loss)  # no opt_g.zero_grad(): generator gradients pile up
        opt_g.step()
        self.untoggle_optimizer(opt_g)
        self.toggle_optimizer(opt_d)
        d_loss = F.binary_cross_entropy_with_logits(
            self.discriminator(real), torch.ones(len(real), 1)
        ) + F.binary_cross_entropy_with_logits(
            self.discriminator(fake.detach()), torch.zeros(len(real), 1)
        )
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)

    def configure_optimizers(self):
        return [
            torch.optim.Adam(self.generator.parameters(), lr=1e-3),
            torch.optim.Adam(self.discriminator.parameters(), lr=1e-3),
        ]


class EpochIntervalPlannedTask(ClassificationTask):
    """The configured schedule, sized in optimizer steps by the plan, returned per epoch."""

    def configure_optimizers(self):
        config = super().configure_optimizers()
        config["lr_scheduler"]["interval"] = "epoch"
        return config


class RunningTotalTask(ClassificationTask):
    """Keeps a running total of the loss as a tensor: each step's graph chains onto the last."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.total: torch.Tensor | float = 0.0

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.total = self.total + loss
        return loss


class BareStepSizedOneCycleTask(ClassificationTask):
    """OneCycleLR sized by estimated_stepping_batches, returned bare: Lightning steps it per
    epoch."""

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        total = int(self.trainer.estimated_stepping_batches)
        return [opt], [torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=total)]


class AttributeFreezeTask(ClassificationTask):
    """`module.requires_grad = False` on the feature extractor: a plain attribute, no freeze."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.net.features.requires_grad = False


class NoRunningStatsNet(DigitsCNN):
    """BatchNorm without running statistics: eval normalises with each batch's own."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, module in list(self.features.named_children()):
            if isinstance(module, nn.BatchNorm2d):
                self.features[int(name)] = nn.BatchNorm2d(
                    module.num_features, track_running_stats=False
                )


class _FixedSeedSampler(torch.utils.data.Sampler[int]):
    """Shuffles from `seed + epoch` but has no set_epoch: the same order every epoch."""

    def __init__(self, size: int) -> None:
        self.size, self.epoch = size, 0

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.epoch)
        return iter(torch.randperm(self.size, generator=generator).tolist())

    def __len__(self) -> int:
        return self.size


class RepeatedOrderDigits(DigitsDataModule):
    def train_dataloader(self):
        train = self._require("train")
        return torch.utils.data.DataLoader(
            train, batch_size=self.batch_size, sampler=_FixedSeedSampler(len(train))
        )


class HalfWeightsTask(ClassificationTask):
    """`.half()` on the net: float16 weights updated with no float32 copy."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.net.half()


class PrefixedWeightsTask(ClassificationTask):
    """Loads `model.`-prefixed weights into the net with strict=False: nothing matches."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        saved = {f"model.{k}": v.clone() for k, v in self.net.state_dict().items()}
        self.net.load_state_dict(saved, strict=False)


class BroadcastRegressionTask(ClassificationTask):
    """An (N, 1) prediction regressed on (N,) targets: MSE broadcasts them to (N, N)."""

    def training_step(self, batch, batch_idx):
        x, _ = batch
        return F.mse_loss(self(x)[:, :1], x.mean(dim=(1, 2, 3)))


class OverlongOneCycleTask(ClassificationTask):
    """OneCycleLR sized for 100000 steps, stepped per step: the run ends in its warm-up."""

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100_000)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class SchedulerFirstTask(ClassificationTask):
    """Manual optimization that steps the scheduler before the optimizer."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt, sched = self.optimizers(), self.lr_schedulers()
        loss = super().training_step(batch, batch_idx)
        opt.zero_grad()
        self.manual_backward(loss)
        sched.step()
        opt.step()
        return loss.detach()


# -- callbacks --------------------------------------------------------------------------------


class MicroBatchEMA(L.Callback):
    """A hand-written EMA of the weights updated at every training batch's end: under
    accumulation that is every micro-batch, K updates per optimizer step (it decays K times too
    fast). Saved as Lightning's EMA saves it: the average in state_dict, the weights beside it."""

    def __init__(self, decay: float = 0.9) -> None:
        self.decay = decay
        self.average: dict[str, torch.Tensor] = {}

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.average = {n: p.detach().clone() for n, p in pl_module.named_parameters()}

    @torch.no_grad()
    def update(self, pl_module: L.LightningModule) -> None:
        for name, param in pl_module.named_parameters():
            self.average[name].lerp_(param, 1 - self.decay)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.update(pl_module)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        checkpoint["current_model_state"] = dict(checkpoint["state_dict"])
        checkpoint["state_dict"] = {**checkpoint["state_dict"], **self.average}


class StepEMA(MicroBatchEMA):
    """The twin: updates only after a batch that ended an optimizer step."""

    _step = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self._step:
            self._step = trainer.global_step
            self.update(pl_module)


class UnsavedEMA(StepEMA):
    """Averages once per optimizer step, but the checkpoint never sees the average (its twin:
    StepEMA, which saves it)."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        pass
