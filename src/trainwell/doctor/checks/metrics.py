"""metrics.reduction: logged means that batches or ranks will weigh wrongly.

Lightning weighs each batch's `self.log` value by the batch size it extracts (or `batch_size=`)
and, with `sync_dist=True`, averages the ranks' values. Two silent errors follow (fine on the
probe's one process, wrong at scale):

* a value the task averaged itself in an epoch-end hook (`on_validation_epoch_end`, ...) is one
  number per rank, averaged unweighted although ranks hold different numbers of samples (or
  rank 0's only, without sync_dist);
* a per-batch mean over tokens / unmasked targets is weighted by the number of *sequences*.

torchmetrics metrics (logged as objects, or their compute() logged) keep sums and counts and
reduce across ranks themselves: they are the fix, and never flagged.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

import lightning as L
from torchmetrics import Metric

from trainwell import compat
from trainwell.doctor.harness.batches import replay_loader
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.samples import iterate_batches, split_loaders
from trainwell.doctor.harness.spy import LossCall, Spy
from trainwell.doctor.report.verdict import Verdict, passes, skips, warns

TRAIN_BATCHES, VAL_BATCHES = 4, 3
RTOL = 1e-6
STEP_HOOKS = ("training_step", "validation_step", "test_step")


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * max(1.0, abs(a), abs(b))


def _item_weighting(watch: LogWatch) -> tuple[list[dict[str, Any]], list[str]]:
    """Per-batch logged means equal to a loss averaged over items whose ratio to the batch size
    Lightning weighs them by varies from batch to batch; and what is wrong with each."""
    found: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for stage, calls, logged in watch.batches:
        for name, (mean, weight) in logged.items():
            match = [c for c in calls if c.value is not None and _close(c.value, mean)]
            if match and match[0].items:
                found.setdefault((stage, name), []).append((weight, match[0].items))
    weighted, findings = [], []
    for (stage, name), pairs in found.items():
        if len({round(items / weight, 9) for weight, items in pairs}) < 2:
            continue
        weights, items = [int(w) for w, _ in pairs], [int(i) for _, i in pairs]
        weighted.append({"name": name, "stage": stage, "weights": weights, "items": items})
        findings.append(
            f"`{name}` ({stage}) is a mean over {items} items (tokens, unmasked targets) per "
            f"batch but Lightning weighs it by batch_size {weights}, so its epoch value is not "
            "the mean over items; pass batch_size=<items> to self.log, or log a torchmetrics "
            "MeanMetric updated with weight=<items>"
        )
    return weighted, findings


def metrics_reduction(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    train = ctx.samples.micro_batches(0, TRAIN_BATCHES)
    loaders = split_loaders(ctx.datamodule, "val")[0] if ctx.has_hook("validation_step") else []
    val_batches = list(islice(iterate_batches(loaders[0]), VAL_BATCHES)) if loaders else []
    watch = LogWatch(Spy(max_calls=64))
    fit = ctx.fit(
        ctx.make_task(),
        replay_loader(train),
        [watch],
        max_steps=len(train),
        val=replay_loader(val_batches) if val_batches else None,
        val_every=len(train) if val_batches else None,
    )
    if fit.error is not None and not watch.batches:
        return skips(f"the short fit failed: {fit.error_line}")
    evidence |= {
        "train_batches": len(train),
        "val_batches": len(val_batches),
        "configured_world_size": ctx.world_size,
        "logged": sorted(f"{hook}:{name}" for hook, name in watch.keys),
    }
    if not watch.keys:
        return skips("the task logs nothing with self.log in training or validation")
    evidence["per_rank_values"], per_rank = _per_rank_values(watch, ctx.world_size)
    evidence["weighted_by_batch_size"], weighted = _item_weighting(watch)
    if findings := per_rank + weighted:
        more = f" (and {len(findings) - 1} more, see evidence)" if len(findings) > 1 else ""
        return warns(findings[0] + more)
    return passes(
        f"{len(watch.keys)} logged key(s): means are weighted by what they average over and "
        "reduce across ranks"
    )


def _per_rank_values(watch: LogWatch, world: int | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Logged means whose epoch value is one number per rank, which ranks combine wrongly (a plain
    tensor from an epoch-end hook, a per-step mean without sync_dist on several ranks)."""
    per_rank, findings = [], []
    for (hook, name), value in watch.keys.items():
        if value.is_metric or value.reduce != "mean" or not value.on_epoch:
            continue
        sync = watch.sync_requested.get(name, value.sync_dist)
        if hook.endswith("_epoch_end"):
            logged = watch.epoch_values.get((hook, name))
            if logged is not None and any(_close(logged, m) for m in watch.metric_values):
                continue  # a metric's compute(), logged
            how = (
                "averages the ranks' values unweighted (sync_dist=True)"
                if sync
                else "reports rank 0's value only (no sync_dist)"
            )
            findings.append(
                f"`{name}` is logged from {hook} as a plain tensor, a per-rank value: on several "
                f"ranks Lightning {how}, although ranks hold different numbers of samples; log a "
                "torchmetrics metric (e.g. MeanMetric updated with weight=batch size) or "
                "all-reduce a sum and a count yourself"
            )
        elif hook in STEP_HOOKS and not sync and world is not None and world > 1:
            findings.append(
                f"`{name}` is logged from {hook} without sync_dist on a {world}-rank run: the "
                "epoch value is rank 0's mean only; log a torchmetrics metric or pass sync_dist=True"
            )
        else:
            continue
        per_rank.append({"name": name, "hook": hook, "sync_dist": sync})
    return per_rank, findings


class LogWatch(L.Callback):
    """Around each batch of a short real fit: what Lightning accumulated for each logged mean
    (compat.logged_values) and what the spied loss functions averaged over."""

    def __init__(self, spy: Spy) -> None:
        self.spy = spy
        # Per batch: its stage, the loss calls, and each logged mean's (value, weight) by name.
        self.batches: list[tuple[str, list[LossCall], dict[str, tuple[float, float]]]] = []
        self.metric_values: list[float] = []
        self.keys: dict[tuple[str, str], compat.LoggedValue] = {}  # (hook, name) -> last seen
        self.epoch_values: dict[tuple[str, str], float | None] = {}
        # sync_dist as the task asked for it: Lightning records it only when the run is
        # distributed, and the probe runs on one process.
        self.sync_requested: dict[str, bool] = {}
        self._before: dict[tuple[str, str], compat.LoggedValue] = {}

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
