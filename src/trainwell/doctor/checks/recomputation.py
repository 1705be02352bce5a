"""metrics.recomputation: a logged validation accuracy is what the validation step's outputs give.

On the fit harness/logged.py runs (validation twice, as at a run's epoch ends), every accuracy the
second validation logs (a name with `acc`, not a running best or a top-k) must equal the micro
or macro accuracy (fraction or percentage) of the class scores the validation step hands its loss.
"""

from __future__ import annotations

from typing import Any

import torch

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.logged import LogWatch, logging_fit
from trainwell.doctor.harness.outputs import _call_ids
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips

TOLERANCE = 1e-4  # a float32 metric against the same counts in float64
NOT_ACCURACY = ("best", "top", "std")


def _accuracies(watch: LogWatch) -> list[float] | None:
    """Micro and macro accuracy of the validation step's own class scores, as fractions and as
    percentages; None where a batch hands its loss no class scores against class ids."""
    read = [
        next((r for c in watch.spy.calls_in(i) if (r := _call_ids(c, batch)) is not None), None)
        for i, batch in watch.val_batches.items()
    ]
    if any(r is None for r in read):
        return None
    predicted, true = torch.cat([r[0] for r in read]), torch.cat([r[1] for r in read])
    right = (predicted == true).double()
    micro = float(right.mean())
    macro = float(torch.stack([right[true == c].mean() for c in true.unique()]).mean())
    return [micro, macro, 100 * micro, 100 * macro]


def metrics_recomputation(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    if not ctx.has_hook("validation_step"):
        return skips("the task defines no validation_step: no validation metric to recompute")
    fit, watch = logging_fit(ctx)
    if fit.error is not None:
        return skips(f"the short fit with validation failed: {fit.error_line}")
    if not watch.val_batches:
        return skips("no validation or train batches to run")
    logged = {
        name: float(value)
        for name, value in fit.trainer.callback_metrics.items()
        if "val" in name.lower()
        and "acc" in name.lower()
        and not any(word in name.lower() for word in NOT_ACCURACY)
        and value.numel() == 1
    }
    if not logged:
        return skips("validation logs no accuracy (a name with `acc`) to recompute")
    recomputed = _accuracies(watch)
    if recomputed is None:
        return skips(
            "the validation step hands its loss no class scores against class ids on every "
            "batch, so its accuracy cannot be recomputed from its outputs"
        )
    evidence |= {"logged": logged, "recomputed_micro_macro": recomputed[:2]}
    evidence["batches"] = batches = len(watch.val_batches)
    for name, value in logged.items():
        if min(abs(value - r) for r in recomputed) > TOLERANCE:
            return fails(
                f"validation logs `{name}` = {value:.4g} but the scores its own validation_step "
                f"hands the loss give {recomputed[0]:.4g} over the same {batches} batches: what is "
                "logged is not this pass's accuracy (a metric object shared with training or never "
                "reset, a list of outputs both steps append to); give each stage its own metric "
                "object and reset it after compute(), or log the object (Lightning resets it)"
            )
    return passes(
        f"{', '.join(f'`{n}`' for n in logged)} equal the accuracy recomputed from the "
        f"validation step's own outputs over {batches} batches"
    )
