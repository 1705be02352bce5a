"""schedule.interval: when the schedulers step, against their declared interval and the plan."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.report.verdict import Check

# A step-sized schedule this many times longer than the run is cut off early. Below it, a
# longer schedule may be deliberate (a run stopped before the schedule's end by design).
LONG = 2


def schedule_interval(ctx: DoctorContext) -> Check:
    """Run 3 optimizer steps with the configured accumulation and count scheduler steps."""
    k = max(1, ctx.accumulate)
    steps = 3
    recorder = Recorder()
    fit = ctx.fit(
        ctx.make_task(),
        ctx.fixed_loader(repeats=k * steps + k),
        [recorder],
        max_steps=steps,
        accumulate=k,
    )
    if fit.error is not None and len(recorder.micro_batches_per_step) < 2:
        return Check("schedule.interval", "skip", f"the short fit failed: {fit.error_line}")
    lrs = recorder.lrs
    windows = [lrs[i * k : (i + 1) * k] for i in range(len(lrs) // k)]
    mid_window = sum(1 for w in windows if len(set(w)) > 1)
    evidence: dict[str, Any] = {
        "accumulate": k,
        "optimizer_steps": len(recorder.micro_batches_per_step),
        "micro_batches_per_step": recorder.micro_batches_per_step,
        "lr_per_micro_batch": lrs,
        "schedulers": recorder.scheduler_configs,
        "scheduler_last_epoch_at_steps": recorder.scheduler_counts,
        "plan_total_optimizer_steps": ctx.plan.total_optimizer_steps,
        "plan_warmup_steps": ctx.plan.warmup_steps,
    }
    if mid_window and k > 1:
        return Check(
            "schedule.interval",
            "fail",
            f"the learning rate changes inside {mid_window} accumulation window(s) of {k} "
            "micro-batches: the scheduler steps per micro-batch, so the schedule ends "
            f"{k}x too early; step it once per optimizer step (interval='step', no manual "
            "scheduler.step() in training_step)",
            evidence,
        )
    if not recorder.scheduler_configs:
        return Check(
            "schedule.interval",
            "pass",
            "no LR scheduler is registered and the LR stays constant within windows",
            evidence,
        )
    probe_estimate = int(fit.trainer.estimated_stepping_batches)
    for index, config in enumerate(recorder.scheduler_configs):
        counts = [c[index] for c in recorder.scheduler_counts]
        per_step = [b - a for a, b in pairwise(counts)]
        evidence[f"scheduler_{index}_steps_per_optimizer_step"] = per_step
        verdict = _judge_scheduler(ctx, config, per_step, k, probe_estimate, evidence)
        if verdict is None:
            verdict = _stepped_before_optimizer(recorder, index, config, evidence)
        if verdict is not None:
            return verdict
    return _stepping_passes(ctx, recorder.scheduler_configs, k, probe_estimate, evidence)


def _judge_scheduler(
    ctx: DoctorContext,
    config: dict[str, Any],
    per_step: list[int],
    k: int,
    probe_estimate: int,
    evidence: dict[str, Any],
) -> Check | None:
    """A verdict for one registered scheduler, or None when it steps as it is registered."""
    name, interval = config["class"], config["interval"]
    total = ctx.plan.total_optimizer_steps
    allowed = {0, 1} if interval == "step" and config["frequency"] > 1 else None
    expected = 1 if interval == "step" else 0
    bad = [p for p in per_step if (p not in allowed if allowed else p != expected)]
    if bad:
        seen = max(bad, key=lambda p: abs(p - expected))
        what = "per micro-batch" if seen == k and k > 1 else f"{seen}x per optimizer step"
        return Check(
            "schedule.interval",
            "fail",
            f"{name} is registered with interval='{interval}' but steps {what} ({seen} "
            f"times per optimizer step, expected {expected}): something steps it by hand as "
            "well, so the schedule runs off its plan; leave stepping to Lightning (or use "
            "manual optimization and step it once per optimizer step)",
            evidence,
        )
    length = config["length"]
    stepwise = interval == "step" and length is not None and total is not None
    if stepwise and length < total and length != probe_estimate:
        return Check(
            "schedule.interval",
            "fail",
            f"{name} is sized for {length} optimizer steps but the run takes {total}: the "
            "schedule ends early (OneCycleLR raises past its end); size it from the plan "
            "(the `total_steps` the template's scheduler `_partial_` receives) or from "
            "trainer.estimated_stepping_batches",
            evidence,
        )
    if stepwise and length >= LONG * total and length != probe_estimate:
        return Check(
            "schedule.interval",
            "warn",
            f"{name} is sized for {length} optimizer steps but the run takes {total} "
            f"({length / total:.1f}x longer): the run stops at {100 * total / length:.0f}% of "
            "its schedule (OneCycleLR still warming up, a decay barely started); size it in "
            "optimizer steps (len(train_loader) per epoch, not len(dataset), or "
            "trainer.estimated_stepping_batches)",
            evidence,
        )
    return None


def _stepped_before_optimizer(
    recorder: Recorder, index: int, config: dict[str, Any], evidence: dict[str, Any]
) -> Check | None:
    """A warning when the scheduler had stepped before its optimizer's first step: a
    scheduler.step() ahead of optimizer.step() skips the schedule's first value (torch warns
    "Detected call of lr_scheduler.step() before optimizer.step()")."""
    first = next((s for s, owners in enumerate(recorder.scheduler_owners) if owners[index]), None)
    if first is None:
        return None
    early = recorder.scheduler_counts[first][index]
    evidence[f"scheduler_{index}_steps_before_its_optimizer"] = early
    if early <= 0:
        return None
    return Check(
        "schedule.interval",
        "warn",
        f"{config['class']} had already stepped {early} time(s) when its optimizer took its "
        "first step (scheduler.step() before optimizer.step()): the schedule's first learning "
        "rate is skipped and every step uses the next one; call optimizer.step() first, then "
        "scheduler.step()",
        evidence,
    )


def _declares_per_step(ctx: DoctorContext) -> bool:
    """The config sizes the schedule in optimizer steps: its scheduler `_partial_` takes the
    plan's total_steps (the template's convention)."""
    factories = ctx.factories()
    scheduler = factories.get("scheduler")
    return bool(scheduler is not None and getattr(scheduler, "accepts", False))


def _sized_in_steps(ctx: DoctorContext, config: dict[str, Any], probe_estimate: int) -> bool:
    """The scheduler itself says it was sized in optimizer steps (OneCycleLR's total_steps equal
    to the run's, or the probe's, trainer.estimated_stepping_batches), not in epochs."""
    length = config["length"]
    sizes = {ctx.plan.total_optimizer_steps, probe_estimate} - {None, ctx.plan.max_epochs}
    return length is not None and length in sizes


def _stepping_passes(
    ctx: DoctorContext,
    configs: list[dict[str, Any]],
    k: int,
    probe_estimate: int,
    evidence: dict[str, Any],
) -> Check:
    total = ctx.plan.total_optimizer_steps
    epochs = [c["class"] for c in configs if c["interval"] == "epoch"]
    expects_epoch = ctx.settings.scheduler_interval == "epoch"
    step_sized = [
        c for c in configs if c["interval"] == "epoch" and _sized_in_steps(ctx, c, probe_estimate)
    ]
    if step_sized and not expects_epoch:
        # Lightning's default interval is 'epoch': a OneCycleLR sized by
        # estimated_stepping_batches and returned bare runs a sliver of its warm-up.
        name, length = step_sized[0]["class"], step_sized[0]["length"]
        return Check(
            "schedule.interval",
            "warn",
            f"{name} is sized for {length} optimizer steps but steps once per epoch "
            "(interval='epoch', Lightning's default for a bare scheduler): the run covers only "
            "the start of its schedule; return {'scheduler': ..., 'interval': 'step'} if "
            "per-step was meant",
            evidence,
        )
    if epochs and _declares_per_step(ctx) and not expects_epoch:
        return Check(
            "schedule.interval",
            "warn",
            f"{epochs[0]} steps once per epoch (interval='epoch'), but the configured scheduler "
            f"is sized in optimizer steps ({total} planned): it would take {total} epochs to "
            "run its course; return it with interval='step' if per-step was meant",
            evidence,
        )
    if epochs:
        return Check(
            "schedule.interval",
            "pass",
            f"{', '.join(epochs)} step(s) once per epoch (interval='epoch', Lightning's "
            "default) and never inside an accumulation window",
            evidence,
        )
    if expects_epoch:
        return Check(
            "schedule.interval",
            "warn",
            "the scheduler steps once per optimizer step, but probe.scheduler_interval=epoch "
            "says per-epoch was meant; return it with interval='epoch' if so",
            evidence,
        )
    return Check(
        "schedule.interval",
        "pass",
        f"the scheduler steps once per optimizer step (accumulate {k}), {total} steps planned",
        evidence,
    )
