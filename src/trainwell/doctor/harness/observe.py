"""The main probe run, shared by several checks: the task trains on one fixed batch.

One real fit on the fixed probe batch (no accumulation) at a constant learning rate, with a
validation pass after `overfit_steps // 2` steps, recorded by `Recorder` and `Spy`. It runs at
least `probe.overfit_steps` steps and goes on while the loss still falls, up to
`probe.overfit_max_steps` steps or `probe.overfit_budget_s` seconds (`OverfitStop`).
overfit.one_batch, grad.flow, grad.zeroing, optimizer.coverage, train.mode, loss.logits,
targets.contract, memory.graph_leak and checkpoint.roundtrip all read it, so the user's hooks
run once for all of them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import lightning as L

from trainwell.doctor.harness.context import DoctorContext, FitResult
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.harness.spy import Spy

NEVER = 2**62  # a scheduler frequency no probe reaches


class ConstantLR(L.Callback):
    """Hold every optimizer at its base learning rate (no warmup, no decay) during a probe.

    A schedule sized for a whole run would keep a 60-step probe inside its warmup (LR near 0)
    and fail a healthy model. The base LR is `initial_lr`, which torch's schedulers record in
    each param group; the schedulers stay registered (their state is still checkpointed) but
    never step. `scale` lowers the LR for the divergence retry.
    """

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.lrs: list[float] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for config in trainer.lr_scheduler_configs:
            config.frequency = NEVER
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = float(group.get("initial_lr", group["lr"])) * self.scale
                self.lrs.append(group["lr"])


class OverfitStop(L.Callback):
    """Stop the probe once the answer is known: the loss reached the target, stopped falling,
    went non-finite, or the time budget ran out. Decided at chunk boundaries of `min_steps // 2`
    optimizer steps after the first `min_steps`."""

    def __init__(
        self, recorder: Recorder, min_steps: int, target_ratio: float, budget_s: float
    ) -> None:
        self.recorder = recorder
        self.min_steps = min_steps
        self.chunk = max(5, min_steps // 2)
        self.target_ratio = target_ratio
        self.budget_s = budget_s
        self.reason = "max_steps"
        self._start = 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        losses = [v for v in self.recorder.losses if v is not None]
        n = len(losses)
        if not losses:
            return
        if not math.isfinite(losses[-1]):
            self.reason = "non-finite loss"
            trainer.should_stop = True
            return
        if n < self.min_steps or (n - self.min_steps) % self.chunk:
            return
        first, last = losses[0], _tail_mean(losses)
        # chunk means, not single steps: dropout and Adam make step losses noisy
        recent = _mean(losses[n - self.chunk :])
        previous = _mean(losses[n - 2 * self.chunk : n - self.chunk])
        if first > 0 and last <= self.target_ratio * first:
            self.reason = "target reached"
        elif recent >= previous * 0.99:
            self.reason = "stopped falling"
        elif time.perf_counter() - self._start > self.budget_s:
            self.reason = "time budget"
        else:
            return
        trainer.should_stop = True


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _tail_mean(values: list[float], n: int = 3) -> float:
    return _mean(values[-n:])


@dataclass
class Observation:
    task: L.LightningModule
    fit: FitResult
    recorder: Recorder
    spy: Spy
    val_every: int
    lr: ConstantLR
    stop: OverfitStop
    seconds: float


def overfit_fit(ctx: DoctorContext, lr_scale: float = 1.0, spy: Spy | None = None) -> Observation:
    """Train a fresh task on the probe batch at a constant LR, extended while the loss falls."""
    settings = ctx.settings
    steps, limit = settings.overfit_steps, max(settings.overfit_steps, settings.overfit_max_steps)
    task = ctx.make_task()
    spy = spy or Spy()
    recorder = Recorder(spy=spy, watch_memory_steps=settings.memory_steps)
    lr = ConstantLR(lr_scale)
    stop = OverfitStop(recorder, steps, settings.overfit_max_ratio, settings.overfit_budget_s)
    val_every = max(1, steps // 2)
    validates = ctx.has_hook("validation_step")
    start = time.perf_counter()
    fit = ctx.fit(
        task,
        ctx.fixed_loader(repeats=limit),
        callbacks=[lr, recorder, stop],
        max_steps=limit,
        val=ctx.fixed_loader() if validates else None,
        val_every=val_every if validates else None,
    )
    return Observation(task, fit, recorder, spy, val_every, lr, stop, time.perf_counter() - start)


def observation(ctx: DoctorContext) -> Observation:
    cached = ctx.__dict__.get("_observation")
    if cached is None:
        cached = ctx.__dict__["_observation"] = overfit_fit(ctx)
    return cached


def crashed_message(obs: Observation) -> str:
    return (
        f"the training step raised {obs.fit.error_line}; fix the failing check above first, "
        "then rerun the doctor"
    )
