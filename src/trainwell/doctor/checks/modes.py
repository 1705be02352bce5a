"""Mode checks: training really runs in train mode, evaluation really runs in eval mode."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import crashed_message, observation
from trainwell.doctor.harness.outputs import evaluation_outputs, output_differences
from trainwell.doctor.report.verdict import Check


def train_mode(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    rec = obs.recorder
    if not rec.losses and obs.fit.error is not None:
        return Check("train.mode", "skip", crashed_message(obs))
    evidence: dict[str, Any] = {
        "batches_checked": len(rec.losses),
        "validation_after_batch": obs.val_every,
        "batches_with_eval_modules": len(rec.eval_modules),
    }
    if rec.eval_modules:
        batch, names = rec.eval_modules[0]
        after_val = batch >= obs.val_every and not any(
            b < obs.val_every for b, _ in rec.eval_modules
        )
        evidence |= {"first_batch": batch, "modules": names[:20], "module_count": len(names)}
        when = "after validation" if after_val else f"from training batch {batch}"
        return Check(
            "train.mode",
            "fail",
            f"{len(names)} module(s) (first: `{names[0]}`) run in eval mode {when}, so BatchNorm "
            "uses stale running statistics and dropout is off while training; do not call "
            ".eval() on the model outside validation (Lightning restores the mode it found)",
            evidence,
        )
    return Check(
        "train.mode",
        "pass",
        f"every module is in train mode at all {len(rec.losses)} training batches, before and "
        "after validation",
        evidence,
    )


def eval_determinism(ctx: DoctorContext) -> Check:
    if not ctx.has_hook("validation_step"):
        return Check(
            "eval.determinism",
            "skip",
            "the task defines no validation_step, so there is no evaluation to check",
        )
    task = observation(ctx).task
    passes = []
    for _ in range(2):
        watch, error = evaluation_outputs(ctx, task)
        if watch is None:  # the user's validation code failed: that is the finding
            return Check("eval.determinism", "fail", f"{error}; fix validation_step")
        passes.append(watch)
    a, b = passes
    diffs = output_differences(a.outputs, b.outputs)
    max_diff = max(diffs) if diffs else 0.0
    in_train = sorted(a.training_modules | b.training_modules)
    evidence = {
        "outputs_compared": len(diffs),
        "max_abs_difference": max_diff,
        "modules_in_train_mode_during_validation": in_train[:20],
    }
    if max_diff > 1e-6 or in_train:
        cause = (
            f"{len(in_train)} module(s) (first: `{in_train[0]}`) run in train mode during validation"
            if in_train
            else "hidden randomness in the forward"
        )
        return Check(
            "eval.determinism",
            "fail",
            f"two validation passes over the same batch differ by {max_diff:.3g}: {cause} (dropout "
            "active, BatchNorm on batch statistics); do not call self.train() in validation code "
            "and keep randomness out of eval forward",
            evidence,
        )
    if not diffs:
        return Check(
            "eval.determinism",
            "skip",
            "validation_step calls no module that holds parameters, so no output was compared",
            evidence,
        )
    return Check(
        "eval.determinism",
        "pass",
        "two validation passes give identical outputs, with every module in eval mode",
        evidence,
    )
