"""accumulation.equivalence: K micro-batches through the real loop == one batch of K x B.

Gradients are read at `on_before_optimizer_step` (what the optimizer would apply), so the
user's training_step, loss scaling and Lightning's /K are all in the comparison. Dropout is set
to p=0 and BatchNorm to eval in both runs: they make micro-batch and full-batch forwards differ
by design, which is reported separately as a warning about BatchNorm.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainwell.doctor.harness.context import DoctorContext, fixed_loader
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.report.verdict import Check

RTOL = 1e-4


def _step_grads(
    ctx: DoctorContext, state: dict, x: torch.Tensor, y: torch.Tensor, micro: int, k: int
) -> tuple[dict[str, torch.Tensor] | None, str]:
    task = ctx.make_task()
    task.load_state_dict(state)
    rec = Recorder(freeze_stochastic=True, keep_grad_tensors=True)
    fit = ctx.fit(task, fixed_loader(x, y, micro), [rec], max_steps=1, accumulate=k)
    if not rec.step_grad_tensors:
        return None, fit.error_line or "no optimizer step ran"
    return rec.step_grad_tensors[0], ""


def _compare(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, float]:
    names = sorted(set(a) & set(b))
    diff = max((float((a[n] - b[n]).abs().max()) for n in names), default=0.0)
    scale = max((float(b[n].abs().max()) for n in names), default=0.0)
    norm_a = float(torch.sqrt(sum((a[n].double() ** 2).sum() for n in names)))
    norm_b = float(torch.sqrt(sum((b[n].double() ** 2).sum() for n in names)))
    return {
        "max_abs_difference": diff,
        "relative_difference": diff / scale if scale else 0.0,
        "norm_ratio": norm_a / norm_b if norm_b else 0.0,
        "tensors_compared": len(names),
    }


def accumulation_equivalence(ctx: DoctorContext) -> Check:
    probe = ctx.make_task()
    if not probe.automatic_optimization:
        return Check(
            "accumulation.equivalence",
            "skip",
            "the task uses manual optimization; Lightning's accumulation does not apply "
            "(compare your own windows against one large batch by hand)",
        )
    configured = ctx.accumulate
    k = configured if configured > 1 else 2
    x, y = ctx.batch
    micro = max(1, len(x) // k)
    x, y = x[: micro * k], y[: micro * k]
    state = {n: t.clone() for n, t in probe.state_dict().items()}
    evidence: dict[str, Any] = {
        "accumulate_configured": configured,
        "accumulate_probed": k,
        "micro_batch": micro,
    }
    windowed, err = _step_grads(ctx, state, x, y, micro, k)
    whole, err2 = _step_grads(ctx, state, x, y, micro * k, 1)
    if windowed is None or whole is None:
        return Check(
            "accumulation.equivalence", "skip", f"a probe fit failed: {err or err2}", evidence
        )
    main = _compare(windowed, whole)
    evidence["full_window"] = main
    checks = [(f"a full window of {k} micro-batches", main)]
    plan = ctx.plan
    if configured > 1 and (
        plan.last_window_batches != configured or plan.last_batch_size != plan.micro_batch
    ):
        # The run has a short tail window: here one micro-batch that closes the epoch alone.
        tail, err = _step_grads(ctx, state, x[:micro], y[:micro], micro, k)
        alone, err2 = _step_grads(ctx, state, x[:micro], y[:micro], micro, 1)
        if tail is not None and alone is not None:
            evidence["tail_window"] = _compare(tail, alone)
            checks.append((f"a short tail window (1 micro-batch, K={k})", evidence["tail_window"]))
    for label, result in checks:
        if result["relative_difference"] > RTOL:
            return Check(
                "accumulation.equivalence",
                "fail",
                f"{label} gives {result['norm_ratio']:.3g}x the gradient of the same samples in one "
                f"batch (relative difference {result['relative_difference']:.2g}): the loss is not "
                "normalised per window (Lightning divides every micro-batch by K, a short tail "
                "too); return the micro-batch mean scaled by the window's sample count, as "
                "ClassificationTask does",
                evidence,
            )
    norms = [n for n, m in probe.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    evidence["batchnorm_layers"] = len(norms)
    if norms and configured > 1:
        return Check(
            "accumulation.equivalence",
            "warn",
            f"gradients match one batch of {k * micro}, but {len(norms)} BatchNorm layer(s) "
            f"normalise over micro-batches of {plan.micro_batch}, not the effective batch of "
            f"{plan.effective_batch}; expected with accumulation, use model.net.norm=group if "
            "that matters",
            evidence,
        )
    where = "" if configured > 1 else f" (probed with K={k}; this run does not accumulate)"
    return Check(
        "accumulation.equivalence",
        "pass",
        f"{k} micro-batches give the gradient of one batch of {k * micro}{where}",
        evidence,
    )
