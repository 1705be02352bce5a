"""Learning-rate scaling with the effective batch: the LR in config is meant for a reference batch.

Changing data.batch_size, accumulate_grad_batches or the number of GPUs changes the effective batch;
keeping the LR fixed then silently changes the training recipe. `linear` (Goyal et al., SGD) and
`sqrt` (common for Adam) rescale it; `none` keeps the configured LR as is.
"""

from __future__ import annotations

import math

from trainwell.errors import TrainwellError

RULES = ("none", "linear", "sqrt")


def scale_lr(base_lr: float, rule: str, effective_batch: int, reference_batch: int) -> float:
    """`base_lr` is the LR at `reference_batch`; returns the LR for `effective_batch`."""
    if rule not in RULES:
        raise TrainwellError(f"lr_scaling.rule must be one of {'|'.join(RULES)}, got {rule!r}")
    if reference_batch < 1:
        raise TrainwellError(f"lr_scaling.reference_batch must be >= 1, got {reference_batch}")
    ratio = effective_batch / reference_batch
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    return base_lr
