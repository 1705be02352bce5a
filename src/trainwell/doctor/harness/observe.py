"""The main probe run: one real fit on one fixed batch at a constant LR, recorded by `Recorder` and
`Spy`, extended while the loss falls (`OverfitStop`); most checks read it: user hooks run once."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from statistics import fmean
from typing import Any

import lightning as L
import torch

from trainwell.doctor.harness.batches import leaves, replay_loader
from trainwell.doctor.harness.context import DoctorContext, FitResult, quiet, shared_probe
from trainwell.doctor.harness.recorder import Recorder, scalar_loss
from trainwell.doctor.harness.settings import ProbeSettings
from trainwell.doctor.harness.spy import CLASS_INDEX, VALUE_LOSSES, LossCall, Spy

NEVER = 2**62  # a scheduler frequency no probe reaches


class ConstantLR(L.Callback):
    """Hold every optimizer at its base LR (torch's schedulers record `initial_lr`) x `scale`: a
    schedule sized for a whole run would keep a 60-step probe in its warmup (LR near 0) and fail
    a healthy model. The schedulers stay registered (still checkpointed) but never step."""

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
    """Stop once the loss reached the target, stopped falling, went non-finite, or time ran out;
    judged every `min_steps // 2` optimizer steps after `min_steps` (K times as many micro-batches
    for a task stepping every K), or after `min_steps x patience` micro-batches if sooner."""

    def __init__(self, recorder: Recorder, settings: ProbeSettings) -> None:
        self.recorder, self.settings, self.reason = recorder, settings, "max_steps"
        self.min_steps, self.patience = settings.overfit_steps, settings.window_batches
        self.chunk, self._start = max(5, self.min_steps // 2), 0.0
        self._decided = self.min_steps - self.chunk  # micro-batches seen at the last decision

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        losses = [v for v in self.recorder.losses if v is not None]
        n, steps = len(losses), self.recorder.stepping_batches
        if not losses:
            return
        if not math.isfinite(losses[-1]):
            self.reason, trainer.should_stop = "non-finite loss", True
            return
        over = time.perf_counter() - self._start > self.settings.overfit_budget_s
        if steps < self.min_steps and n < self.min_steps * self.patience and not over:
            return
        per_step = n / steps if steps else self.patience  # micro-batches per stepping one
        chunk = max(1, round(self.chunk * per_step))
        if n - self._decided < chunk:
            return
        self._decided = n
        first, last = losses[0], fmean(losses[-3:])
        # chunk means, not single steps: dropout and Adam make step losses noisy
        recent = fmean(losses[n - chunk :])
        previous = fmean(losses[max(0, n - 2 * chunk) : n - chunk] or losses[:1])
        if first > 0 and last <= self.settings.overfit_max_ratio * first:
            self.reason = "target reached"
        elif recent >= previous * 0.99:
            self.reason = "stopped falling"
        elif over:
            self.reason = "time budget"
        else:
            return
        trainer.should_stop = True


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


def overfit_fit(ctx: DoctorContext, lr_scale: float = 1.0) -> Observation:
    settings, task, spy = ctx.settings, ctx.make_task(), Spy()
    limit = max(settings.overfit_steps, settings.overfit_max_steps)
    recorder = Recorder(spy=spy, watch_memory_steps=settings.memory_steps)
    lr, stop = ConstantLR(lr_scale), OverfitStop(recorder, settings)
    val_every = max(1, settings.overfit_steps // 2)
    val = ctx.fixed_loader() if ctx.has_hook("validation_step") else None
    train, start = ctx.fixed_loader(repeats=limit), time.perf_counter()
    fit = ctx.fit(task, train, [lr, recorder, stop], limit, val=val, val_every=val_every)
    return Observation(task, fit, recorder, spy, val_every, lr, stop, time.perf_counter() - start)


observation = shared_probe(overfit_fit)


@shared_probe
def short_fit(ctx: DoctorContext) -> tuple[L.LightningModule, FitResult]:
    """A fresh task fitted overfit_steps on the real train batches at a constant LR (read only)."""
    task, steps = ctx.make_task(), ctx.settings.overfit_steps
    batches = ctx.samples.micro_batches(0, steps)
    train = replay_loader(batches, repeats=math.ceil(steps / max(len(batches), 1)))
    return task, ctx.fit(task, train, callbacks=[ConstantLR()], max_steps=steps)


def unstepped_message(obs: Observation) -> str:
    return (
        f"no optimizer step in the {len(obs.recorder.losses)} micro-batches of the probe fit on "
        "one fixed batch: the task steps on a condition that fit never met (an epoch's last "
        "batch, a count of samples), so there is no step to read"
    )


def crashed_message(obs: Observation) -> str:
    return (
        f"the training step raised {obs.fit.error_line}; fix the failing check above first, "
        "then rerun the doctor"
    )


# What lets a probe call training_step on its own, outside a trainer.
ALONE = "return the loss from training_step without reading self.trainer or self.optimizers()"


def training_loss(task: Any, batch: Any) -> torch.Tensor:
    loss = scalar_loss(task.training_step(copy.copy(batch), 0))
    if loss is None:
        raise ValueError("training_step returned no scalar loss")
    return loss


def eval_loss(task: Any, batch: Any, seed: int = 0) -> float:
    """training_step's loss on `batch` without grad (the task in eval mode: the caller's
    choice), randomness seeded alike and the global RNG left as it was."""
    with torch.random.fork_rng(devices=[]), torch.no_grad(), quiet():
        torch.manual_seed(seed)
        return float(training_loss(task, batch))


def first_loss(ctx: DoctorContext) -> LossCall | None:
    return next(iter(observation(ctx).spy.losses), None)


def no_classes(ctx: DoctorContext) -> str | None:
    """Why the task has no classes, when the probe fit shows a regression loss on float targets
    (None: it may have classes); the checks about classes skip with it instead of asking."""
    call = first_loss(ctx)
    if call is None or call.name not in VALUE_LOSSES or not call.target.is_floating_point():
        return None
    return f"the task predicts values ({call.name} on float targets), not classes"


def class_target(ctx: DoctorContext) -> str:
    """Where the batches keep their class ids: the probe batch's tensor that a class-index loss
    takes as its target (any batch structure), else the second of (input, label) pairs."""
    call = first_loss(ctx)
    found = target_path(ctx, call) if call is not None and call.name in CLASS_INDEX else None
    return found or "batch[1]"


def target_path(ctx: DoctorContext, call: LossCall) -> str | None:
    """Which tensor of the probe batch the loss received as its target, if any: the same values
    in any shape, dtype or order (`y.flatten()`, `y.float()`, `y[order]`), same order first."""
    target = call.target.reshape(-1).double()
    found = [
        (path, leaf.reshape(-1).double())
        for path, leaf in leaves(ctx.batch)
        if leaf.numel() == target.numel() and not leaf.is_complex()
    ]
    tests = (torch.equal, lambda a, b: torch.equal(a.sort().values, b.sort().values))
    return next((path for same in tests for path, values in found if same(values, target)), None)
