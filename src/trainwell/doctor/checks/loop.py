"""Loop checks: overfit one batch, graph leaks, scheduler stepping."""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

from trainwell.doctor.harness.context import DoctorContext, fixed_loader
from trainwell.doctor.harness.observe import crashed_message, observation
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.report.verdict import Check


def overfit_one_batch(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    losses = obs.recorder.losses
    if obs.fit.error is not None and len(losses) < 2:
        return Check("overfit.one_batch", "skip", crashed_message(obs))
    if not losses or any(v is None for v in losses):
        return Check(
            "overfit.one_batch",
            "skip",
            "training_step returned no scalar loss to follow (manual optimization?)",
        )
    values = [float(v) for v in losses]  # type: ignore[arg-type]
    first = values[0]
    last = sum(values[-3:]) / len(values[-3:])
    ratio = last / first if first > 0 else math.inf
    limit = ctx.settings.overfit_max_ratio
    evidence = {
        "steps": len(values),
        "batch_size": len(ctx.batch[0]),
        "initial_loss": first,
        "final_loss": last,
        "ratio": ratio,
        "max_ratio": limit,
        "losses": [round(v, 5) for v in values],
    }
    if not all(math.isfinite(v) for v in values):
        bad = next(i for i, v in enumerate(values) if not math.isfinite(v))
        return Check(
            "overfit.one_batch",
            "fail",
            f"the loss on one fixed batch becomes non-finite at step {bad}; lower the LR or find "
            "the overflowing op (see grad.flow and data.finite)",
            evidence,
        )
    if ratio > limit:
        return Check(
            "overfit.one_batch",
            "fail",
            f"the loop cannot memorise one fixed batch of {len(ctx.batch[0])}: loss {first:.3f} -> "
            f"{last:.3f} in {len(values)} steps (needs <= {limit:g}x); a wrong loss, missing "
            "gradients, bad labels or an optimizer that does not update (see the checks above)",
            evidence,
        )
    return Check(
        "overfit.one_batch",
        "pass",
        f"loss on one fixed batch falls {first:.3f} -> {last:.4f} in {len(values)} steps",
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
    x, y = ctx.batch
    recorder = Recorder()
    fit = ctx.fit(
        ctx.make_task(),
        fixed_loader(x, y, len(x), repeats=k * steps + k),
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
