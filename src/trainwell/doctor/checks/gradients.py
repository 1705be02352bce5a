"""grad.flow and grad.zeroing, read from the real loop's first optimizer steps."""

from __future__ import annotations

import math

from trainwell.doctor.checks.finite_difference import finite_difference
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import crashed_message, observation
from trainwell.doctor.report.verdict import Check


def grad_flow(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    rec = obs.recorder
    if not rec.step_grads:
        error = obs.fit.error_line
        if "does not require grad" in error or "does not have a grad_fn" in error:
            return Check(
                "grad.flow",
                "fail",
                "the loss has no graph back to any parameter (the forward ran under "
                "torch.no_grad()/inference_mode or detached its output), so backward cannot "
                "compute gradients; remove the no_grad/.detach()/.numpy() from the forward",
                {"error": error},
            )
        return Check(
            "grad.flow", "skip", crashed_message(obs) if error else "no optimizer step ran"
        )
    grads = rec.step_grads[0]
    none = [n for n, g in grads.items() if g is None]
    zero = [n for n, g in grads.items() if g == 0.0]
    nonfinite = [n for n, g in grads.items() if g is not None and not math.isfinite(g)]
    evidence = {
        "grad_norm": grads,
        "none": none,
        "zero": zero,
        "non_finite": nonfinite,
        "trainable_tensors": len(grads),
    }
    if nonfinite:
        return Check(
            "grad.flow",
            "fail",
            f"{len(nonfinite)} parameter(s) (first: `{nonfinite[0]}`) get NaN/Inf gradients at the "
            "first step; find the op producing them with torch.autograd.set_detect_anomaly(True)",
            evidence,
        )
    if none or zero:
        dead = none + zero
        how = "no gradient (None)" if none else "an all-zero gradient"
        return Check(
            "grad.flow",
            "fail",
            f"{len(dead)} of {len(grads)} trainable tensors (first: `{dead[0]}`) get {how} after "
            "backward: the graph is cut between them and the loss (torch.no_grad() in forward, "
            ".detach(), .numpy()/.item() round-trips) or they are unused; keep the forward "
            "differentiable or freeze them explicitly",
            evidence,
        )
    mismatched, why = finite_difference(ctx)
    evidence |= {"finite_difference_mismatches": mismatched, "finite_difference_skipped": why}
    if mismatched:
        first = mismatched[0]
        return Check(
            "grad.flow",
            "warn",
            f"autograd's gradient of `{first['tensor']}` ({first['autograd']:.4g}) disagrees "
            f"with the loss's finite difference ({first['finite_difference']:.4g}) at "
            f"{len(mismatched)} coordinate(s): a custom backward, a gradient hook, or part of "
            "the loss computed from .data or detached weights; unless the mismatch is by "
            "design (gradient reversal, a straight-through estimator), fix the gradient path",
            evidence,
        )
    checked = "" if why else "; finite differences agree with autograd"
    return Check(
        "grad.flow",
        "pass",
        f"all {len(grads)} trainable tensors get finite, non-zero gradients{checked}",
        evidence,
    )


def grad_zeroing(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    watched = obs.recorder.stale_steps
    if not watched:
        reason = crashed_message(obs) if obs.fit.error else "fewer than two optimizer steps ran"
        return Check("grad.zeroing", "skip", reason)
    leaked = [(step, names, norm) for step, names, norm in watched if names]
    evidence = {
        "optimizer_steps_checked": len(watched),
        "steps_with_stale_grads": len(leaked),
        "stale_grad_norm_per_step": [round(norm, 6) for _, _, norm in watched[:10]],
    }
    if leaked:
        step, names, norm = leaked[0]
        evidence["first_stale_parameters"] = names[:5]
        return Check(
            "grad.zeroing",
            "fail",
            f"optimizer step {step} applies gradients that were never cleared since that "
            f"optimizer's previous step ({len(names)} tensor(s), first `{names[0]}`, norm "
            f"{norm:.3g}), so every update sums all past gradients; do not override "
            "optimizer_zero_grad (or make it call optimizer.zero_grad()), and with manual "
            "optimization call opt.zero_grad() once per step",
            evidence,
        )
    return Check(
        "grad.zeroing",
        "pass",
        f"each of {len(watched)} optimizer steps after the first applies only gradients "
        "computed since that optimizer last stepped",
        evidence,
    )
