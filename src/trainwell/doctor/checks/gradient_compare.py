"""How the accumulation probes compare the gradient of a window with that of one batch."""

from __future__ import annotations

import torch

ID = "accumulation.equivalence"
RTOL = 1e-4
RANDOM = (  # why two runs of the same batch cannot be compared exactly
    "the same batch gives different gradients under two seeds even with dropout modules at p=0 "
    "and BatchNorm in eval (functional dropout or randomness in training_step?), so windows "
    "cannot be compared exactly; draw it in the datamodule to compare them"
)


def compare(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, float]:
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
