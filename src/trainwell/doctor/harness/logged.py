"""The fit metrics.reduction and metrics.recomputation share, and what it logs batch by batch beside
what its steps computed: a fresh task trains TRAIN_STEPS steps on real train batches, validating
twice on the first real validation batches as a run does at its epoch ends, so state one pass
leaves behind (an unreset metric, a list both steps append to) shows in the second."""

from __future__ import annotations

from itertools import islice
from typing import Any

import lightning as L
from torchmetrics import Metric

from trainwell import compat
from trainwell.doctor.harness.batches import replay_loader
from trainwell.doctor.harness.context import DoctorContext, FitResult, shared_probe
from trainwell.doctor.harness.samples import iterate_batches, split_loaders
from trainwell.doctor.harness.spy import LossCall, Spy

TRAIN_STEPS, VAL_BATCHES = 4, 8
MAX_CALLS = 16 * (TRAIN_STEPS + 2 * VAL_BATCHES)  # loss calls recorded: a few per batch
STEP_HOOKS = ("training_step", "validation_step", "test_step")


@shared_probe
def logging_fit(ctx: DoctorContext) -> tuple[FitResult, LogWatch]:  # read only
    train = ctx.samples.micro_batches(0, TRAIN_STEPS)
    loaders = split_loaders(ctx.datamodule, "val")[0] if ctx.has_hook("validation_step") else []
    val = list(islice(iterate_batches(loaders[0]), VAL_BATCHES)) if loaders else []
    watch = LogWatch()
    fit = ctx.fit(
        ctx.make_task(), replay_loader(train), [watch], max_steps=len(train),
        val=replay_loader(val) if val else None, val_every=max(1, len(train) // 2) if val else None,
    )  # fmt: skip
    watch.spy.leave()
    return fit, watch


class LogWatch(L.Callback):
    """Around each batch of a short real fit: what Lightning accumulated for each logged mean
    (compat.logged_values) and what the spied loss functions averaged over."""

    def __init__(self) -> None:
        self.spy = Spy(max_calls=MAX_CALLS)
        # Per batch: its stage, the loss calls, and each logged mean's (value, weight) by name.
        self.batches: list[tuple[str, list[LossCall], dict[str, tuple[float, float]]]] = []
        self.metric_values: list[float] = []
        self.keys: dict[tuple[str, str], compat.LoggedValue] = {}  # (hook, name) -> last seen
        self.epoch_values: dict[tuple[str, str], float | None] = {}
        # sync_dist as the task asked for it: Lightning records it only when the run is
        # distributed, and the probe runs on one process.
        self.sync_requested: dict[str, bool] = {}
        self._before: dict[tuple[str, str], compat.LoggedValue] = {}
        self.val_batches: dict[int, Any] = {}  # the latest validation pass's, by batch index

    def on_validation_start(self, *args: Any) -> None:
        self.val_batches = {}

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        original = pl_module.log

        def log(name: str, value: Any, *args: Any, **kwargs: Any) -> None:
            self.sync_requested[name] = bool(kwargs.get("sync_dist", False))
            original(name, value, *args, **kwargs)

        pl_module.log = log  # type: ignore[method-assign]

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        pl_module.__dict__.pop("log", None)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._before = {(v.hook, v.name): v for v in compat.logged_values(trainer)}
        self.spy.watch(len(self.batches))
        if not trainer.training:
            self.val_batches[len(self.batches)] = args[1]  # (module, batch, batch_idx)

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.spy.leave()
        stage, logged = "train" if trainer.training else "val", {}
        self.batches.append((stage, self.spy.calls_in(len(self.batches)), logged))
        for value in compat.logged_values(trainer):
            key = (value.hook, value.name)
            self.keys[key] = value
            if value.hook not in STEP_HOOKS or value.batch_sizes is None or not value.on_epoch:
                continue
            before = self._before.get(key)
            total = (value.total or 0.0) - ((before.total or 0.0) if before else 0.0)
            weight = value.batch_sizes - ((before.batch_sizes or 0.0) if before else 0.0)
            if weight > 0:
                logged[value.name] = (total / weight, weight)

    on_validation_batch_start = on_train_batch_start
    on_validation_batch_end = on_train_batch_end

    def on_exception(self, *args: Any) -> None:
        self.spy.leave()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Callbacks' epoch-end hooks run before the module's: what its metrics compute now is
        what an epoch-end hook could log from them."""
        for module in pl_module.modules():
            if isinstance(module, Metric) and module.update_count > 0:
                value = module.compute()
                if hasattr(value, "numel") and value.numel() == 1:
                    self.metric_values.append(float(value))

    on_validation_epoch_end = on_train_epoch_end

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for value in compat.logged_values(trainer):
            self.keys[(value.hook, value.name)] = value
            if value.hook.endswith("_epoch_end"):
                logged = trainer.callback_metrics.get(value.name)
                number = float(logged) if logged is not None and logged.numel() == 1 else None
                self.epoch_values[(value.hook, value.name)] = number

    on_validation_end = on_train_end
