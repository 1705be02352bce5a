"""Learning-rate scaling with the effective batch: the LR in config is meant for a reference batch.

Changing data.batch_size, accumulate_grad_batches or the number of GPUs changes the effective batch;
keeping the LR fixed then silently changes the training recipe. `linear` (Goyal et al., SGD) and
`sqrt` (common for Adam) rescale it; `none` keeps the configured LR as is.
"""

from __future__ import annotations

import math

# rule -> the LR's factor for (effective batch / reference batch). Their names are the values
# `lr_scaling.rule` may take (config_values.py checks them before the run).
FACTORS = {"none": lambda ratio: 1.0, "linear": lambda ratio: ratio, "sqrt": math.sqrt}
RULES = tuple(FACTORS)


def scale_lr(base_lr: float, rule: str, effective_batch: int, reference_batch: int) -> float:
    """`base_lr` is the LR at `reference_batch`; returns the LR for `effective_batch`."""
    return base_lr * FACTORS[rule](effective_batch / reference_batch)
