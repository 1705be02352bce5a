"""Loop checks: overfit one batch, graph leaks, scheduler stepping."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import (
    Observation,
    crashed_message,
    observation,
    overfit_fit,
)
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.report.verdict import Check


@dataclass
class Trend:
    """How a loss curve moved: the verdict's numbers."""

    kind: str  # pass | slow | flat | rising | non-finite
    steps: int
    first: float
    last: float
    ratio: float  # last / first
    drop: float  # 1 - mean(last quarter) / mean(first quarter): robust to dropout noise
    recent_drop_per_100: float  # relative drop per 100 steps over the last quarter


FLAT = 0.02  # the loss moved less than 2% between the first and the last quarter


def trend(values: list[float], max_ratio: float) -> Trend:
    n = len(values)
    if not all(math.isfinite(v) for v in values):
        bad = next(i for i, v in enumerate(values) if not math.isfinite(v))
        return Trend("non-finite", bad, values[0], math.nan, math.nan, math.nan, math.nan)
    first = values[0]
    last = sum(values[-3:]) / len(values[-3:])
    ratio = last / first if first > 0 else math.inf
    q = max(1, n // 4)
    head, tail = sum(values[:q]) / q, sum(values[-q:]) / q
    drop = 1 - tail / head if head > 0 else 0.0
    before = values[-2 * q : -q] or values[:q]
    recent = 1 - tail / (sum(before) / len(before)) if sum(before) > 0 else 0.0
    per_100 = recent * 100 / q
    if ratio <= max_ratio:
        kind = "pass"
    elif drop < -FLAT:
        kind = "rising"
    elif drop < FLAT:
        kind = "flat"
    else:
        kind = "slow"
    return Trend(kind, n, first, last, ratio, drop, per_100)


def _losses(obs: Observation) -> list[float] | None:
    values = obs.recorder.losses
    if not values or any(v is None for v in values):
        return None
    return [float(v) for v in values]  # type: ignore[arg-type]


def overfit_one_batch(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    values = _losses(obs)
    if obs.fit.error is not None and (values is None or len(values) < 2):
        return Check("overfit.one_batch", "skip", crashed_message(obs))
    if values is None:
        return Check(
            "overfit.one_batch",
            "skip",
            "training_step returned no scalar loss and no backward() was seen to follow",
        )
    limit = ctx.settings.overfit_max_ratio
    seen = trend(values, limit)
    size = ctx.batch_size
    evidence: dict[str, Any] = {
        "steps": seen.steps,
        "batch_size": size,
        "constant_lr": obs.lr.lrs[:4],
        "stopped_because": obs.stop.reason,
        "seconds": round(obs.seconds, 2),
        "initial_loss": seen.first,
        "final_loss": seen.last,
        "ratio": seen.ratio,
        "max_ratio": limit,
        "first_to_last_quarter_drop": seen.drop,
        "recent_drop_per_100_steps": seen.recent_drop_per_100,
        "losses": [round(v, 5) for v in values[:: max(1, len(values) // 200)]],
    }
    if seen.kind in ("rising", "non-finite"):
        return _diverged(ctx, seen, evidence)
    if seen.kind == "flat":
        return Check(
            "overfit.one_batch",
            "fail",
            f"the loss on one fixed batch of {size} does not move in {seen.steps} steps at a "
            f"constant LR ({seen.first:.4g} -> {seen.last:.4g}, {seen.drop:+.1%} from the first "
            "to the last quarter): the optimizer does not update the weights (LR 0, frozen or "
            "detached parameters, a loss without a graph to them; see the checks above)",
            evidence,
        )
    if seen.kind == "slow" and obs.stop.reason == "stopped falling":
        return Check(
            "overfit.one_batch",
            "warn",
            f"the loss on one fixed batch of {size} falls {seen.first:.4g} -> {seen.last:.4g} in "
            f"{seen.steps} steps ({seen.drop:.0%} from the first to the last quarter) and levels "
            f"off above {limit:g}x: the model cannot memorise this batch (little capacity, or "
            "targets the inputs do not determine, like the next token of a random sequence); "
            "fine if expected, otherwise raise the capacity",
            evidence,
        )
    if seen.kind == "slow":
        return Check(
            "overfit.one_batch",
            "warn",
            f"the loss on one fixed batch of {size} falls {seen.first:.4g} -> {seen.last:.4g} in "
            f"{seen.steps} steps ({seen.drop:.0%} from the first to the last quarter, still "
            f"{seen.recent_drop_per_100:.1%} per 100 steps when the probe stopped: "
            f"{obs.stop.reason}) but not to {limit:g}x: it learns, slowly (a small model or "
            "LR); fine if intended, otherwise raise the capacity or the LR",
            evidence,
        )
    return Check(
        "overfit.one_batch",
        "pass",
        f"loss on one fixed batch falls {seen.first:.3f} -> {seen.last:.4f} in {seen.steps} "
        "steps at a constant LR",
        evidence,
    )


def _diverged(ctx: DoctorContext, seen: Trend, evidence: dict[str, Any]) -> Check:
    """Rising or non-finite at the configured LR: retry once at a tenth of it."""
    what = (
        f"becomes non-finite at step {seen.steps}"
        if seen.kind == "non-finite"
        else f"rises ({-seen.drop:+.0%} from the first to the last quarter)"
    )
    retry = overfit_fit(ctx, lr_scale=0.1)
    again = _losses(retry)
    if again is not None and retry.fit.error is None:
        second = trend(again, ctx.settings.overfit_max_ratio)
        evidence["retry_lr_x0.1"] = {
            "kind": second.kind,
            "steps": second.steps,
            "initial_loss": second.first,
            "final_loss": second.last,
        }
        if second.kind in ("pass", "slow"):
            return Check(
                "overfit.one_batch",
                "warn",
                f"at the configured LR held constant the loss on one fixed batch {what}; at a "
                f"tenth of it it falls {second.first:.4g} -> {second.last:.4g} in "
                f"{second.steps} steps: the LR is at the edge of stability, so the run relies on "
                "its warmup (lower the LR if it diverges)",
                evidence,
            )
    return Check(
        "overfit.one_batch",
        "fail",
        f"the loss on one fixed batch {what} at the configured LR held constant, and does not "
        "fall at a tenth of it either: a wrong loss sign, exploding updates or bad labels (see "
        "grad.flow and data.finite)",
        evidence,
    )


def memory_graph_leak(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    rec, spy = obs.recorder, obs.spy
    counts, saved = rec.live_graph_tensors, rec.retained_saved_bytes
    if len(counts) < 3:
        return Check(
            "memory.graph_leak", "skip", crashed_message(obs) if obs.fit.error else "too few steps"
        )
    growth = (counts[-1] - counts[1]) / (len(counts) - 2)
    evidence = {
        "steps_watched": len(counts),
        "live_graph_tensors_per_step": counts,
        "growth_per_step": growth,
        "retained_saved_bytes_per_step": saved,
        "backward_calls": spy.backward_calls,
        "retain_graph_calls": spy.retain_graph_calls,
    }
    steady_growth = growth >= 1 and all(b >= a for a, b in pairwise(counts[1:]))
    if spy.retain_graph_calls:
        return Check(
            "memory.graph_leak",
            "fail",
            f"backward(retain_graph=True) is called in {spy.retain_graph_calls} of "
            f"{spy.backward_calls} backward calls, which keeps each step's activations alive "
            "until the graph is dropped; call backward once per graph without retain_graph",
            evidence,
        )
    if steady_growth:
        return Check(
            "memory.graph_leak",
            "fail",
            f"{growth:.1f} graph-attached tensor(s) more survive every step (losses or outputs "
            "stored without .item()/.detach()), so memory grows until OOM; log loss.item() or "
            "store tensor.detach()",
            evidence,
        )
    if saved and saved[-1] > 0:
        return Check(
            "memory.graph_leak",
            "fail",
            f"{saved[-1]} bytes of activations saved for backward are still alive after the "
            "step (a graph is kept beyond backward); drop references to graph-attached tensors",
            evidence,
        )
    return Check(
        "memory.graph_leak",
        "pass",
        f"no graph survives a training step ({len(counts)} steps watched, growth {growth:g}/step)",
        evidence,
    )


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
    counts = recorder.scheduler_counts
    lrs = recorder.lrs
    windows = [lrs[i * k : (i + 1) * k] for i in range(len(lrs) // k)]
    mid_window = sum(1 for w in windows if len(set(w)) > 1)
    evidence: dict[str, Any] = {
        "accumulate": k,
        "optimizer_steps": len(recorder.micro_batches_per_step),
        "micro_batches_per_step": recorder.micro_batches_per_step,
        "lr_per_micro_batch": lrs,
        "scheduler_last_epoch_at_steps": counts,
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
    if not counts or not counts[0]:
        return Check(
            "schedule.interval",
            "pass",
            "no LR scheduler is registered and the LR stays constant within windows",
            evidence,
        )
    per_step = [(b[0] - a[0]) for a, b in pairwise(counts)]
    evidence["scheduler_steps_per_optimizer_step"] = per_step
    expected = 1 if ctx.settings.scheduler_interval == "step" else 0
    if any(p != expected for p in per_step):
        seen = max(per_step, key=lambda p: abs(p - expected))
        what = (
            "per micro-batch"
            if seen == k and k > 1
            else ("per epoch" if seen == 0 else f"{seen}x per step")
        )
        return Check(
            "schedule.interval",
            "fail",
            f"the scheduler steps {what} ({seen} times per optimizer step, expected {expected}), so "
            f"the schedule is off by that factor over {ctx.plan.total_optimizer_steps} planned "
            "steps; return it with interval='step' (or set probe.scheduler_interval=epoch if "
            "per-epoch is meant)",
            evidence,
        )
    return Check(
        "schedule.interval",
        "pass",
        f"the scheduler steps once per optimizer step (accumulate {k}), "
        f"{ctx.plan.total_optimizer_steps} steps planned",
        evidence,
    )
