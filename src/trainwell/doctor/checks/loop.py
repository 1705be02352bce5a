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
    """The losses of the steps that trained; a step whose training_step returned None (how
    Lightning skips a batch) has none and is left out. None when fewer than two remain."""
    values = [float(v) for v in obs.recorder.losses if v is not None]
    return values if len(values) >= 2 else None


def _skipped(obs: Observation) -> int:
    return sum(1 for v in obs.recorder.losses if v is None)


def overfit_one_batch(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    values = _losses(obs)
    if obs.fit.error is not None and (values is None or len(values) < 2):
        return Check("overfit.one_batch", "skip", crashed_message(obs))
    if values is None:
        return Check(
            "overfit.one_batch",
            "skip",
            f"training_step returned no scalar loss in {_skipped(obs)} of "
            f"{len(obs.recorder.losses)} steps and no backward() was seen to follow",
        )
    limit = ctx.settings.overfit_max_ratio
    seen = trend(values, limit)
    size = ctx.batch_size
    evidence: dict[str, Any] = {
        "steps": seen.steps,
        "steps_skipped_by_training_step": _skipped(obs),
        "optimizers": len(obs.fit.trainer.optimizers),
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
    if len(obs.fit.trainer.optimizers) > 1 and seen.kind != "non-finite":
        return _adversarial(seen, evidence)
    if seen.kind in ("rising", "non-finite"):
        return _diverged(ctx, seen, evidence)
    if seen.kind in ("flat", "slow"):
        return _not_memorised(seen, size, limit, obs.stop.reason, evidence)
    return Check(
        "overfit.one_batch",
        "pass",
        f"loss on one fixed batch falls {seen.first:.3f} -> {seen.last:.4f} in {seen.steps} "
        "steps at a constant LR",
        evidence,
    )


def _not_memorised(
    seen: Trend, size: int | None, limit: float, reason: str, evidence: dict[str, Any]
) -> Check:
    """Flat: nothing updates the weights (fail). Slow: it learns, but not to the target."""
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
    if seen.kind == "slow" and reason == "stopped falling":
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
    return Check(
        "overfit.one_batch",
        "warn",
        f"the loss on one fixed batch of {size} falls {seen.first:.4g} -> {seen.last:.4g} in "
        f"{seen.steps} steps ({seen.drop:.0%} from the first to the last quarter, still "
        f"{seen.recent_drop_per_100:.1%} per 100 steps when the probe stopped: "
        f"{reason}) but not to {limit:g}x: it learns, slowly (a small model or "
        "LR); fine if intended, otherwise raise the capacity or the LR",
        evidence,
    )


def _adversarial(seen: Trend, evidence: dict[str, Any]) -> Check:
    """Several optimizers (a GAN's generator and discriminator) pull against each other: the
    loss of one fixed batch need not fall, so its curve is reported, not judged."""
    n = evidence["optimizers"]
    status = "pass" if seen.kind == "pass" else "warn"
    return Check(
        "overfit.one_batch",
        status,
        f"the task steps {n} optimizers (adversarial or alternating training): the loss "
        f"backpropagated last goes {seen.first:.4g} -> {seen.last:.4g} in {seen.steps} steps "
        f"on one fixed batch ({seen.kind}), which says little when the players compete; "
        "check each player's loss curve in a short real run",
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
                f"{second.steps} steps: the LR is at the edge of stability for a constant LR; "
                "fine if a warmup or decay keeps it lower early on, otherwise lower it",
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


def _grows(values: list[int], least: float) -> bool:
    """Up at every watched step after the first (which may build lazy state), by `least` on
    average: a graph kept from each step, not one kept from the latest step only."""
    tail = values[1:]
    if len(tail) < 2:
        return False
    rate = (tail[-1] - tail[0]) / (len(tail) - 1)
    return rate >= least and all(b > a for a, b in pairwise(tail))


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
        "live_graph_tensors_after_each_step": counts,
        "growth_per_step": growth,
        "saved_bytes_alive_after_each_step": saved,
        "backward_calls": spy.backward_calls,
        "retain_graph_calls": spy.retain_graph_calls,
    }
    return _leak_verdict(counts, saved, spy, growth, evidence)


def _leak_verdict(
    counts: list[int], saved: list[int], spy: Any, growth: float, evidence: dict[str, Any]
) -> Check:
    """Only growth is a leak: one step's graph kept until the next replaces it is not."""
    tensors_grow = _grows(counts, 1)
    bytes_grow = _grows(saved, 1)
    unreused = spy.steps_retaining_only()
    evidence["steps_retaining_a_graph_no_backward_reuses"] = unreused
    if unreused:
        return Check(
            "memory.graph_leak",
            "fail",
            f"backward(retain_graph=True) is the only backward in {len(unreused)} of "
            f"{len(counts)} watched steps: no second backward reuses the graph, so it only "
            "keeps the step's activations alive for as long as anything refers to the loss "
            "(they pile up once a loss tensor is kept); call backward without retain_graph",
            evidence,
        )
    if spy.retain_graph_calls and (tensors_grow or bytes_grow):
        return Check(
            "memory.graph_leak",
            "fail",
            f"backward(retain_graph=True) is called in {spy.retain_graph_calls} of "
            f"{spy.backward_calls} backward calls and the activations it keeps grow every step "
            f"({saved[1]} -> {saved[-1]} bytes alive over {len(saved) - 1} steps); free the "
            "graph with a last backward without retain_graph, and keep no loss tensors",
            evidence,
        )
    if tensors_grow or bytes_grow:
        return Check(
            "memory.graph_leak",
            "fail",
            f"{growth:.1f} graph-attached tensor(s) more survive every step "
            f"({counts[1]} -> {counts[-1]}; saved activations alive {saved[1]} -> {saved[-1]} "
            "bytes): losses or outputs stored without .item()/.detach(), so memory grows until "
            "OOM; log loss.item() or store tensor.detach()",
            evidence,
        )
    if saved and saved[-1] > 0:
        return Check(
            "memory.graph_leak",
            "pass",
            f"{saved[-1]} bytes of one step's graph stay alive after it (a reference to the "
            "latest loss or output), but nothing grows over "
            f"{len(counts)} steps: no leak; store .detach() if that memory matters",
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
        if verdict is not None:
            return verdict
    return _stepping_passes(ctx, recorder.scheduler_configs, k, evidence)


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
    return None


def _declares_per_step(ctx: DoctorContext) -> bool:
    """The config sizes the schedule in optimizer steps: its scheduler `_partial_` takes the
    plan's total_steps (the template's convention)."""
    factories = ctx.factories()
    scheduler = factories.get("scheduler")
    return bool(scheduler is not None and getattr(scheduler, "accepts", False))


def _stepping_passes(
    ctx: DoctorContext, configs: list[dict[str, Any]], k: int, evidence: dict[str, Any]
) -> Check:
    total = ctx.plan.total_optimizer_steps
    epochs = [c["class"] for c in configs if c["interval"] == "epoch"]
    expects_epoch = ctx.settings.scheduler_interval == "epoch"
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
