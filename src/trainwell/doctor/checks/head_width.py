"""model.head_width: does the model's output layer have one output per class the data declares?"""

from __future__ import annotations

from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import observation
from trainwell.doctor.report.verdict import Verdict, passes, skips, warns


def _declared(ctx: DoctorContext) -> int | None:
    """The classes the datamodule declares (its `num_classes`), when it declares a count."""
    n = getattr(ctx.datamodule, "num_classes", None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _logits_width(ctx: DoctorContext) -> int | None:
    """The class dimension of the logits the probe fit gave a class-index loss (cross entropy
    takes them as (batch, classes, ...)); None when no such loss was seen."""
    for call in observation(ctx).spy.losses:
        if call.name in ("cross_entropy", "nll_loss") and call.input.dim() >= 2:
            return int(call.input.shape[1])
    return None


def model_head_width(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    declared = _declared(ctx)
    data = type(ctx.datamodule).__name__
    if declared is None:
        return skips(
            f"{data} declares no num_classes: no class count to compare with (give it a "
            "num_classes attribute)"
        )
    width = _logits_width(ctx)
    configured = ctx.cfg.model.get("num_classes")
    evidence |= {
        "data_num_classes": declared,
        "logits_width": width,
        "model_num_classes": configured,
    }
    # The logits the loss saw are the head's real width; the config's number is the fallback
    # for a loss that takes no class dimension.
    head = width if width is not None else configured
    if not isinstance(head, int):
        return skips(
            "no class-index loss seen and no model.num_classes: the head's width is unknown"
        )
    if head == declared:
        return passes(f"the head has one output per class ({declared})")
    return warns(
        f"the model's head has {head} outputs but {data} declares {declared} classes; drop the "
        f"model.num_classes override (it defaults to the datamodule's) or set "
        f"model.num_classes={declared}"
    )
