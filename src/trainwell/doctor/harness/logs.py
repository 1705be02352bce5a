"""How the task's `self.log` calls will be reduced: per batch, per epoch, across ranks.

`LogWatch` follows a short real fit (a few real train micro-batches, a validation pass over a
few real val batches). Around every batch it reads what Lightning accumulated for each logged
mean (compat.logged_values): the value logged for that batch and the batch size Lightning
weighs it by; the spy says what the loss functions of that batch averaged over, so a logged loss
can be matched to its item count. Before the task's epoch-end hooks run it records what the
task's torchmetrics compute (values already reduced across ranks), and after them what was
logged from those hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import lightning as L
from torchmetrics import Metric

from trainwell import compat
from trainwell.doctor.harness.batches import size_of
from trainwell.doctor.harness.spy import LossCall, Spy

STEP_HOOKS = ("training_step", "validation_step", "test_step")


@dataclass
class BatchLog:
    stage: str
    batch_size: int | None  # as Lightning extracts it from the batch
    calls: list[LossCall]
    logged: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (mean, weight)


class LogWatch(L.Callback):
    def __init__(self, spy: Spy) -> None:
        self.spy = spy
        self.batches: list[BatchLog] = []
        self.metric_values: list[float] = []
        self.keys: dict[tuple[str, str], compat.LoggedValue] = {}  # (hook, name) -> last seen
        self.epoch_values: dict[tuple[str, str], float | None] = {}
        # sync_dist as the task asked for it: Lightning records it only when the run is
        # distributed, and the probe runs on one process.
        self.sync_requested: dict[str, bool] = {}
        self._before: dict[tuple[str, str], compat.LoggedValue] = {}
        self._seen = 0

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        original = pl_module.log

        def log(name: str, value: Any, *args: Any, **kwargs: Any) -> None:
            self.sync_requested[name] = bool(kwargs.get("sync_dist", False))
            original(name, value, *args, **kwargs)

        pl_module.log = log  # type: ignore[method-assign]

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        pl_module.__dict__.pop("log", None)

    # -- per batch ---------------------------------------------------------------------------
    def _start(self, trainer: L.Trainer) -> None:
        self._before = {(v.hook, v.name): v for v in compat.logged_values(trainer)}
        self.spy.watch(self._seen)

    def _end(self, trainer: L.Trainer, stage: str, batch: Any) -> None:
        self.spy.leave()
        record = BatchLog(stage, size_of(batch), self.spy.calls_in(self._seen))
        self._seen += 1
        for value in compat.logged_values(trainer):
            key = (value.hook, value.name)
            self.keys[key] = value
            if value.hook not in STEP_HOOKS or value.batch_sizes is None or not value.on_epoch:
                continue
            before = self._before.get(key)
            prior_total = before.total if before is not None and before.total is not None else 0.0
            prior_weight = before.batch_sizes if before is not None else None
            total = (value.total or 0.0) - prior_total
            weight = value.batch_sizes - (prior_weight or 0.0)
            if weight > 0:
                record.logged[value.name] = (total / weight, weight)
        self.batches.append(record)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._start(trainer)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *args: Any
    ) -> None:
        self._end(trainer, "train", batch)

    def on_validation_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._start(trainer)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *args: Any
    ) -> None:
        self._end(trainer, "val", batch)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, err: BaseException
    ) -> None:
        self.spy.leave()

    # -- epoch ends ----------------------------------------------------------------------------
    def _metrics(self, pl_module: L.LightningModule) -> None:
        """Callbacks' epoch-end hooks run before the module's: what its metrics compute now is
        what an epoch-end hook could log from them."""
        for module in pl_module.modules():
            if isinstance(module, Metric) and module.update_count > 0:
                value = module.compute()
                if hasattr(value, "numel") and value.numel() == 1:
                    self.metric_values.append(float(value))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._metrics(pl_module)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._metrics(pl_module)

    def _epoch_logs(self, trainer: L.Trainer) -> None:
        for value in compat.logged_values(trainer):
            self.keys[(value.hook, value.name)] = value
            if value.hook.endswith("_epoch_end"):
                logged = trainer.callback_metrics.get(value.name)
                number = float(logged) if logged is not None and logged.numel() == 1 else None
                self.epoch_values[(value.hook, value.name)] = number

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_logs(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_logs(trainer)
