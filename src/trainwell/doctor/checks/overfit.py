"""overfit.one_batch: can the loop memorise one fixed batch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import (
    Observation,
    crashed_message,
    observation,
    overfit_fit,
    unstepped_message,
)
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns


@dataclass
class Trend:
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
    if (bad := next((i for i, v in enumerate(values) if not math.isfinite(v)), None)) is not None:
        return Trend("non-finite", bad, values[0], math.nan, math.nan, math.nan, math.nan)
    first, last = values[0], sum(values[-3:]) / len(values[-3:])
    ratio = last / first if first > 0 else math.inf
    q = max(1, n // 4)
    head, tail = sum(values[:q]) / q, sum(values[-q:]) / q
    drop = 1 - tail / head if head > 0 else 0.0
    before = values[-2 * q : -q] or values[:q]
    recent = 1 - tail / (sum(before) / len(before)) if sum(before) > 0 else 0.0
    if ratio <= max_ratio:
        kind = "pass"
    elif drop < -FLAT:
        kind = "rising"
    elif drop < FLAT:
        kind = "flat"
    else:
        kind = "slow"
    return Trend(kind, n, first, last, ratio, drop, recent * 100 / q)


def _losses(obs: Observation) -> list[float] | None:
    """Losses of the steps that trained (a step returning None skips); None if fewer than two."""
    values = [float(v) for v in obs.recorder.losses if v is not None]
    return values if len(values) >= 2 else None


def overfit_one_batch(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    # The probe fit is this check's work even when run up front: its time is counted here.
    ran_before = ctx.seconds_of(overfit_fit) is not None
    obs = observation(ctx)
    verdict = _verdict(ctx, obs, evidence)
    verdict.seconds = obs.seconds if ran_before else 0.0
    return verdict


def _verdict(ctx: DoctorContext, obs: Observation, evidence: dict[str, Any]) -> Verdict:
    values = _losses(obs)
    if obs.fit.error is not None and values is None:
        return skips(crashed_message(obs))
    if values is None:
        return skips(
            f"training_step returned no scalar loss in {obs.recorder.losses.count(None)} of "
            f"{len(obs.recorder.losses)} steps and no backward() was seen to follow; return "
            "the loss from training_step to test it"
        )
    limit = ctx.settings.overfit_max_ratio
    seen = trend(values, limit)
    size = ctx.batch_size
    evidence |= {
        "steps": seen.steps,
        "steps_skipped_by_training_step": obs.recorder.losses.count(None),
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
        # Several optimizers (a GAN's generator and discriminator) pull against each other: the
        # loss of one fixed batch need not fall, so its curve is reported, not judged.
        return (passes if seen.kind == "pass" else warns)(
            f"the task steps {evidence['optimizers']} optimizers (adversarial or alternating "
            f"training): the loss backpropagated last goes {seen.first:.4g} -> {seen.last:.4g} in "
            f"{seen.steps} steps on one fixed batch ({seen.kind}), which says little when the "
            "players compete; check each player's loss curve in a short real run"
        )
    if seen.kind in ("rising", "non-finite"):
        return _diverged(ctx, seen, evidence)
    if seen.kind == "flat" and not obs.recorder.step_grads:
        return skips(unstepped_message(obs))
    if seen.kind == "flat":  # nothing updates the weights
        return fails(
            f"the loss on one fixed batch of {size} does not move in {seen.steps} steps at a "
            f"constant LR ({seen.first:.4g} -> {seen.last:.4g}, {seen.drop:+.1%} from the first "
            "to the last quarter): the optimizer does not update the weights (LR 0, frozen or "
            "detached parameters, a loss without a graph to them; see the checks above)"
        )
    falls = (
        f"the loss on one fixed batch of {size} falls {seen.first:.4g} -> {seen.last:.4g} in "
        f"{seen.steps} steps ({seen.drop:.0%} from the first to the last quarter"
    )
    if seen.kind == "slow" and obs.stop.reason == "stopped falling":
        return warns(
            f"{falls}) and levels off above {limit:g}x: the model cannot memorise this batch "
            "(little capacity, or targets the inputs do not determine, like the next token of a "
            "random sequence); fine if expected, otherwise raise the capacity"
        )
    if seen.kind == "slow":
        return warns(
            f"{falls}, still {seen.recent_drop_per_100:.1%} per 100 steps when the probe stopped: "
            f"{obs.stop.reason}) but not to {limit:g}x: it learns, slowly (a small model or "
            "LR); fine if intended, otherwise raise the capacity or the LR"
        )
    return passes(
        f"loss on one fixed batch falls {seen.first:.3f} -> {seen.last:.4f} in {seen.steps} "
        "steps at a constant LR"
    )


def _diverged(ctx: DoctorContext, seen: Trend, evidence: dict[str, Any]) -> Verdict:
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
        evidence["retry_lr_x0.1"] = dict(
            kind=second.kind, steps=second.steps, initial_loss=second.first, final_loss=second.last
        )
        if second.kind in ("pass", "slow"):
            return warns(
                f"at the configured LR held constant the loss on one fixed batch {what}; at a "
                f"tenth of it it falls {second.first:.4g} -> {second.last:.4g} in "
                f"{second.steps} steps: the LR is at the edge of stability for a constant LR; "
                "fine if a warmup or decay keeps it lower early on, otherwise lower it"
            )
    return fails(
        f"the loss on one fixed batch {what} at the configured LR held constant, and does not fall "
        "at a tenth of it either: a wrong loss sign or exploding updates (see grad.flow)"
    )
