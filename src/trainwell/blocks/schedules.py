"""Learning-rate schedules, as factories Hydra can `_partial_` (total steps arrive at fit time)."""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def warmup_steps_for(
    total_steps: int, warmup_fraction: float = 0.0, warmup_steps: int | None = None
) -> int:
    """Warmup length in optimizer steps: explicit `warmup_steps` wins over a fraction of the total."""
    if warmup_steps is not None:
        return max(0, min(int(warmup_steps), total_steps))
    return max(0, min(round(warmup_fraction * total_steps), total_steps))


class WarmupCosine:
    """Multiplier for LambdaLR: linear warmup from ~0 to 1, then cosine decay to `min_ratio`.

    A callable object rather than a closure so LambdaLR's state_dict can hold it without pickling
    code (checkpoints are loaded with weights_only=True).
    """

    def __init__(self, total_steps: int, warmup_steps: int, min_ratio: float) -> None:
        self.total_steps = max(1, total_steps)
        self.warmup_steps = warmup_steps
        self.min_ratio = min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / (self.warmup_steps + 1)
        decay_steps = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / decay_steps)
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine(
    optimizer: Optimizer,
    total_steps: int,
    warmup_fraction: float = 0.0,
    warmup_steps: int | None = None,
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """Cosine schedule over `total_steps` optimizer steps (not micro-batches) with linear warmup."""
    warm = warmup_steps_for(total_steps, warmup_fraction, warmup_steps)
    return LambdaLR(optimizer, WarmupCosine(total_steps, warm, min_lr_ratio))
