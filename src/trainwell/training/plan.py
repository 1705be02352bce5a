"""The training plan: seed 002's arithmetic, computed and printed before any GPU hour is spent.

"3 epochs at batch 32" means a precise number of forward passes and optimizer steps; getting it
wrong fires the LR schedule at the wrong time or trains for a fraction of what was meant.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class TrainingPlan:
    dataset_size: int
    micro_batch: int
    accumulate: int
    world_size: int
    drop_last: bool
    max_epochs: int
    max_steps: int
    warmup_steps: int
    # derived
    effective_batch: int
    samples_per_rank: int
    iterations_per_epoch: int
    last_batch_size: int
    optimizer_steps_per_epoch: int
    last_window_batches: int
    total_optimizer_steps: int
    epochs: float
    examples_seen: int
    # learning rate: the configured one (meant for `reference_batch`) and the one used
    lr_rule: str = "none"
    reference_batch: int = 0
    base_lr: float | None = None
    lr: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        """Human-readable plan, one fact per line."""
        tail = ""
        if self.last_window_batches != self.accumulate:
            tail = f" (last window: {self.last_window_batches} micro-batches)"
        return [
            f"dataset: {self.dataset_size} samples, {self.world_size} rank(s), "
            f"{self.samples_per_rank} samples per rank",
            f"micro-batch {self.micro_batch} x accumulate {self.accumulate} x world {self.world_size}"
            f" = effective batch {self.effective_batch}",
            f"iterations/epoch: {self.iterations_per_epoch} (last batch {self.last_batch_size}"
            f"{', drop_last' if self.drop_last else ''})",
            f"optimizer steps/epoch: {self.optimizer_steps_per_epoch}{tail}",
            f"total optimizer steps: {self.total_optimizer_steps} over {self.epochs:g} epoch(s), "
            f"warmup {self.warmup_steps}",
            f"examples seen: {self.examples_seen}",
            *self._lr_lines(),
        ]

    def _lr_lines(self) -> list[str]:
        if self.lr is None:
            return []
        if self.lr_rule == "none":
            return [f"lr: {self.lr:g} (no scaling with the effective batch)"]
        return [
            f"lr: {self.lr:g} = {self.base_lr:g} at batch {self.reference_batch} scaled "
            f"{self.lr_rule} to {self.effective_batch}"
        ]


def make_plan(
    dataset_size: int,
    micro_batch: int,
    accumulate: int = 1,
    world_size: int = 1,
    max_epochs: int | None = None,
    max_steps: int = -1,
    drop_last: bool = False,
    warmup_steps: int = 0,
    limit_batches: int | float | None = None,
) -> TrainingPlan:
    """Compute the plan the way Lightning runs it.

    Each rank sees ceil(N / world) samples (DistributedSampler pads to equal shares). Lightning
    steps the optimizer every `accumulate` micro-batches and once more at the end of an epoch for
    a shorter tail window, so steps/epoch = ceil(iterations / accumulate). `max_steps` (optimizer
    steps) wins over `max_epochs` when it is reached first. `limit_batches` is Lightning's
    limit_train_batches / overfit_batches (an int caps the batches, a float takes a fraction).
    """
    if micro_batch < 1 or accumulate < 1 or world_size < 1:
        raise ValueError("micro_batch, accumulate and world_size must be >= 1")
    per_rank = math.ceil(dataset_size / world_size)
    if drop_last:
        iterations, last_batch = per_rank // micro_batch, micro_batch
    else:
        iterations = math.ceil(per_rank / micro_batch)
        last_batch = per_rank - (iterations - 1) * micro_batch if iterations else 0
    limited = _limit(iterations, limit_batches)
    if limited < iterations:  # Lightning runs the first `limited` batches, all of them full
        iterations, last_batch = limited, micro_batch
    steps_per_epoch = math.ceil(iterations / accumulate)
    last_window = iterations - (steps_per_epoch - 1) * accumulate if steps_per_epoch else 0
    epochs_cap = max_epochs if max_epochs is not None and max_epochs >= 0 else None
    by_epochs = steps_per_epoch * epochs_cap if epochs_cap is not None else None
    if max_steps is not None and max_steps >= 0:
        total = max_steps if by_epochs is None else min(max_steps, by_epochs)
    elif by_epochs is not None:
        total = by_epochs
    else:
        raise ValueError("set trainer.max_epochs or trainer.max_steps: the plan needs an end")
    samples_per_epoch = (iterations - 1) * micro_batch + last_batch if iterations else 0
    samples_per_epoch *= world_size
    epochs = total / steps_per_epoch if steps_per_epoch else 0.0
    full_epochs, rest_steps = divmod(total, steps_per_epoch) if steps_per_epoch else (0, 0)
    examples = full_epochs * samples_per_epoch + rest_steps * accumulate * micro_batch * world_size
    return TrainingPlan(
        dataset_size=dataset_size,
        micro_batch=micro_batch,
        accumulate=accumulate,
        world_size=world_size,
        drop_last=drop_last,
        max_epochs=max_epochs if max_epochs is not None else -1,
        max_steps=max_steps,
        warmup_steps=warmup_steps,
        effective_batch=micro_batch * accumulate * world_size,
        samples_per_rank=per_rank,
        iterations_per_epoch=iterations,
        last_batch_size=last_batch,
        optimizer_steps_per_epoch=steps_per_epoch,
        last_window_batches=last_window,
        total_optimizer_steps=total,
        epochs=round(epochs, 4),
        examples_seen=examples,
    )


def _limit(iterations: int, limit: int | float | None) -> int:
    """Batches Lightning runs per epoch under limit_train_batches / overfit_batches."""
    if limit is None or (isinstance(limit, float) and limit == 1.0):
        return iterations
    if isinstance(limit, float):
        return int(iterations * limit)
    return min(iterations, int(limit))
