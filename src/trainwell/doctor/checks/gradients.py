"""grad.flow and grad.zeroing, read from the real loop's first optimizer steps."""

from __future__ import annotations

import math

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
    return Check(
        "grad.flow",
        "pass",
        f"all {len(grads)} trainable tensors get finite, non-zero gradients",
        evidence,
    )


def grad_zeroing(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    stale = obs.recorder.stale_grad_norms
    if len(stale) < 2:
        reason = crashed_message(obs) if obs.fit.error else "fewer than two optimizer steps ran"
        return Check("grad.zeroing", "skip", reason)
    leaked = [(i, g) for i, g in enumerate(stale) if g > 0.0]
    evidence = {
        "windows_checked": len(stale),
        "stale_grad_norm_at_window_start": [round(g, 6) for g in stale[:10]],
        "windows_with_stale_grads": len(leaked),
    }
    if leaked:
        step, norm = leaked[0]
        return Check(
            "grad.zeroing",
            "fail",
            f"gradients from the previous optimizer step are still there when step {step} starts "
            f"(norm {norm:.3g}), so every update sums all past gradients; do not override "
            "optimizer_zero_grad (or make it call optimizer.zero_grad())",
            evidence,
        )
    return Check(
        "grad.zeroing",
        "pass",
        f"gradients are cleared before each of {len(stale)} optimizer steps",
        evidence,
    )
