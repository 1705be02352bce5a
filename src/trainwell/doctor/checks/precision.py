"""precision.master_weights: trainable weights stored in float16/bfloat16 without a float32 copy.

`model.half()` (or `.to(torch.bfloat16)`) before training puts the optimizer's update straight
into half-precision weights: an update below the weight's resolution (2^-11 of it in float16,
2^-8 in bfloat16) is rounded away, and in float16 Adam's eps=1e-8 and small squared gradients
flush to 0, so steps divide by zero. Mixed precision (`trainer.precision=16-mixed` /
`bf16-mixed`) keeps float32 weights and casts per op; `*-true` precisions are an explicit choice
of half weights and are not flagged.
"""

from __future__ import annotations

from typing import Any

import torch

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.report.verdict import Verdict, passes

HALF = (torch.float16, torch.bfloat16)


def precision_master_weights(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    task = ctx.reference_task
    precision = str(ctx.probe_cfg.trainer.get("precision", "32-true"))
    half: dict[str, list[str]] = {}
    trainable = 0
    for name, p in task.named_parameters():
        if p.requires_grad:
            trainable += 1
            if p.dtype in HALF:
                half.setdefault(str(p.dtype).removeprefix("torch."), []).append(name)
    evidence |= {
        "trainer_precision": precision,
        "trainable_tensors": trainable,
        "half_tensors": {k: len(v) for k, v in half.items()},
    }
    if not half:
        return passes(
            f"all {trainable} trainable tensors are float32 (trainer.precision={precision} "
            "casts per op where it is mixed)"
        )
    if (
        precision.endswith("-true")
        and not precision.startswith("32")
        and not precision.startswith("64")
    ):
        return passes(
            f"trainable tensors are half precision by the configured trainer.precision={precision} "
            "(no float32 master copy, chosen explicitly)"
        )
    dtype, names = next(iter(half.items()))
    count = sum(len(v) for v in half.values())
    evidence["first_half_tensors"] = names[:5]
    fp16 = "float16" in half
    return Verdict(
        "fail" if fp16 else "warn",
        f"{count} of {trainable} trainable tensors (first: `{names[0]}`) are stored in {dtype} "
        f"and updated in place with no float32 master copy (trainer.precision={precision}): "
        "updates below the weights' resolution are lost"
        + (" and Adam's eps=1e-8 rounds to 0 in float16 (NaN steps)" if fp16 else "")
        + "; keep the weights float32 (drop .half()/.to(dtype)) and set "
        "trainer.precision=16-mixed or bf16-mixed",
    )
