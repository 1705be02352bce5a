"""The training plan: the run's arithmetic, read off the real train loader and printed first.

"3 epochs at batch 32" means a precise number of forward passes and optimizer steps; getting it
wrong fires the LR schedule at the wrong time or trains for a fraction of what was meant. The
plan is computed inside `fit`, after Lightning ran `prepare_data` and the datamodule's `setup`,
from the loader each rank will really iterate (loading/sharding.py): dataset length, batch size,
drop_last, world size, accumulation and the Trainer's limits. What it cannot know (an iterable
dataset without a length, a batch sampler without a batch size) it says.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from torch.utils.data import BatchSampler, DataLoader

from trainwell.loading.samplers import ShardedBatchSampler


@dataclass(frozen=True)
class TrainingPlan:
    dataset_size: int | None
    micro_batch: int | None
    accumulate: int
    world_size: int
    drop_last: bool
    max_epochs: int
    max_steps: int
    warmup_steps: int
    # derived: per epoch, per rank unless said otherwise
    effective_batch: int | None
    global_batches_per_epoch: int | None  # batches one process would cut from the epoch
    iterations_per_epoch: int | None  # micro-batches each rank runs
    last_batch_size: int | None
    padding_batches_per_epoch: int  # zero-weight copies for ranks without data in the last round
    optimizer_steps_per_epoch: int | None
    last_window_batches: int | None
    items_per_epoch: int | None  # samples trained per epoch, all ranks
    items_per_step: int | None  # samples in a full window, all ranks
    last_step_items: int | None  # samples in the epoch's last window, all ranks
    total_optimizer_steps: int | None
    epochs: float | None
    examples_seen: int | None
    item_unit: str = "samples"
    unknown: tuple[str, ...] = field(default_factory=tuple)
    # The sampler draws with replacement (WeightedRandomSampler): an epoch repeats some samples
    # and leaves others out.
    with_replacement: bool = False
    # learning rate: the configured one (meant for `reference_batch`) and the one used
    lr_rule: str = "none"
    reference_batch: int = 0
    base_lr: float | None = None
    lr: float | None = None

    @property
    def batch(self) -> dict[str, int | None]:
        """The batch arithmetic a checkpoint remembers (a resume must not silently change it)."""
        return {
            "micro_batch": self.micro_batch,
            "accumulate": self.accumulate,
            "world_size": self.world_size,
            "effective_batch": self.effective_batch,
        }

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["unknown"] = list(self.unknown)
        return out

    def lines(self) -> list[str]:
        """Human-readable plan, one fact per line."""
        size = "unknown" if self.dataset_size is None else f"{self.dataset_size} samples"
        micro = "?" if self.micro_batch is None else str(self.micro_batch)
        effective = "?" if self.effective_batch is None else str(self.effective_batch)
        once = "each sample once per epoch"
        left = self.dataset_size % self.micro_batch if self.dataset_size and self.micro_batch else 0
        if self.with_replacement:
            once = "drawn with replacement (an epoch repeats some samples, leaves others out)"
        elif self.drop_last and left:
            once = f"each sample at most once per epoch (drop_last leaves {left} out)"
        lines = [
            f"dataset: {size}, {self.world_size} rank(s), {once}",
            f"micro-batch {micro} x accumulate {self.accumulate} x world {self.world_size}"
            f" = effective batch {effective}",
        ]
        if self.iterations_per_epoch is not None:
            pad = (
                f", {self.padding_batches_per_epoch} zero-weight padding batch(es) on ranks "
                "without data in the last round"
                if self.padding_batches_per_epoch
                else ""
            )
            last = "" if self.last_batch_size is None else f" (last batch {self.last_batch_size}"
            last += ", drop_last)" if self.drop_last and last else (")" if last else "")
            lines.append(f"iterations/epoch per rank: {self.iterations_per_epoch}{last}{pad}")
            tail = ""
            if self.last_window_batches != self.accumulate:
                tail = f" (last window: {self.last_window_batches} micro-batches"
                tail += (
                    f", {self.last_step_items} {self.item_unit})" if self.last_step_items else ")"
                )
            lines.append(f"optimizer steps/epoch: {self.optimizer_steps_per_epoch}{tail}")
        if self.items_per_epoch is not None:
            lines.append(f"samples per epoch: {self.items_per_epoch} (all ranks)")
        if self.item_unit != "samples":
            lines.append(
                f"each step averages the loss over the items {self.item_unit} counts "
                "(summed over the window's micro-batches on all ranks as they run)"
            )
        total = "unknown" if self.total_optimizer_steps is None else str(self.total_optimizer_steps)
        epochs = "" if self.epochs is None else f" over {self.epochs:g} epoch(s)"
        lines.append(f"total optimizer steps: {total}{epochs}, warmup {self.warmup_steps}")
        if self.examples_seen is not None:
            lines.append(f"examples seen: {self.examples_seen}")
        lines += [f"not known before training: {reason}" for reason in self.unknown]
        return lines + self._lr_lines()

    def _lr_lines(self) -> list[str]:
        if self.lr is None:
            return []
        if self.lr_rule == "none":
            return [f"lr: {self.lr:g} (no scaling with the effective batch)"]
        return [
            f"lr: {self.lr:g} = {self.base_lr:g} at batch {self.reference_batch} scaled "
            f"{self.lr_rule} to {self.effective_batch}"
        ]


def _limit(iterations: int, limit: int | float | None) -> int:
    """Batches Lightning runs per epoch under limit_train_batches / overfit_batches."""
    if limit is None or (isinstance(limit, float) and limit == 1.0):
        return iterations
    if isinstance(limit, float):
        return int(iterations * limit)
    return min(iterations, int(limit))


def _total_steps(
    steps_per_epoch: int | None, max_epochs: int | None, max_steps: int
) -> tuple[int | None, str]:
    epochs_cap = max_epochs if max_epochs is not None and max_epochs >= 0 else None
    by_epochs = (
        steps_per_epoch * epochs_cap
        if epochs_cap is not None and steps_per_epoch is not None
        else None
    )
    if max_steps is not None and max_steps >= 0:
        return (max_steps if by_epochs is None else min(max_steps, by_epochs)), ""
    if by_epochs is not None:
        return by_epochs, ""
    if steps_per_epoch is None:
        return None, "total optimizer steps (the epoch length is unknown: set trainer.max_steps)"
    raise ValueError("set trainer.max_epochs or trainer.max_steps: the plan needs an end")


def make_plan(
    dataset_size: int | None,
    micro_batch: int | None,
    accumulate: int = 1,
    world_size: int = 1,
    max_epochs: int | None = None,
    max_steps: int = -1,
    drop_last: bool = False,
    warmup_steps: int = 0,
    limit_batches: int | float | None = None,
    global_batches: int | None = None,
    item_unit: str = "samples",
    unknown: tuple[str, ...] = (),
) -> TrainingPlan:
    """The plan the way Lightning runs it over trainwell's sharded loaders.

    One process cuts the epoch into `global_batches` batches of `micro_batch` (the last one shorter
    unless drop_last); rank r of W runs batches r, r+W, ... and every rank runs ceil(batches / W)
    of them, ranks without data in the last round a zero-weight padding batch. Lightning steps the
    optimizer every `accumulate` micro-batches and once more at the end of an epoch for a shorter
    tail window. `max_steps` (optimizer steps) wins over `max_epochs` when reached first.
    `limit_batches` is limit_train_batches / overfit_batches (an int caps the batches per rank, a
    float takes a fraction). `global_batches` alone (no sizes) plans a custom batch sampler.
    """
    if accumulate < 1 or world_size < 1 or (micro_batch is not None and micro_batch < 1):
        raise ValueError("micro_batch, accumulate and world_size must be >= 1")
    sizes = _batch_sizes(dataset_size, micro_batch, drop_last)
    if sizes is not None:
        global_batches = len(sizes)
    given = {
        "dataset_size": dataset_size,
        "micro_batch": micro_batch,
        "accumulate": accumulate,
        "world_size": world_size,
        "drop_last": drop_last,
        "max_epochs": max_epochs if max_epochs is not None else -1,
        "max_steps": max_steps,
        "warmup_steps": warmup_steps,
        "effective_batch": micro_batch * accumulate * world_size if micro_batch else None,
        "item_unit": item_unit,
    }
    if global_batches is None:  # nothing is known about the epoch: only max_steps can end it
        total, reason = _total_steps(None, max_epochs, max_steps)
        return TrainingPlan(
            **given,
            global_batches_per_epoch=None,
            iterations_per_epoch=None,
            last_batch_size=None,
            padding_batches_per_epoch=0,
            optimizer_steps_per_epoch=None,
            last_window_batches=None,
            items_per_epoch=None,
            items_per_step=None,
            last_step_items=None,
            total_optimizer_steps=total,
            epochs=None,
            examples_seen=None,
            unknown=(*unknown, *([reason] if reason else [])),
        )
    return _epoch_plan(given, sizes, global_batches, limit_batches, unknown)


def _batch_sizes(
    dataset_size: int | None, micro_batch: int | None, drop_last: bool
) -> list[int] | None:
    """The sizes of the batches one process cuts the epoch into (None: sizes unknown)."""
    if dataset_size is None or micro_batch is None:
        return None
    full, rest = divmod(dataset_size, micro_batch)
    return [micro_batch] * full + ([rest] if rest and not drop_last else [])


def _epoch_plan(
    given: dict[str, Any],
    sizes: list[int] | None,
    global_batches: int,
    limit_batches: int | float | None,
    unknown: tuple[str, ...],
) -> TrainingPlan:
    """The plan of an epoch of known length: `global_batches` shared round-robin by the ranks."""
    world_size, accumulate = given["world_size"], given["accumulate"]
    rounds = math.ceil(global_batches / world_size)
    iterations = _limit(rounds, limit_batches)
    limited = iterations < rounds
    steps_per_epoch = math.ceil(iterations / accumulate)
    total, _ = _total_steps(steps_per_epoch, given["max_epochs"], given["max_steps"])
    assert total is not None
    used = min(iterations * world_size, global_batches)  # global batches trained per epoch
    items_epoch = items_step = last_items = examples = None
    if sizes is not None:
        items_epoch = sum(sizes[:used])
        items_step = given["effective_batch"]
        last_items = sum(sizes[(steps_per_epoch - 1) * accumulate * world_size : used])
        full_epochs, rest_steps = divmod(total, steps_per_epoch) if steps_per_epoch else (0, 0)
        examples = full_epochs * items_epoch + rest_steps * (items_step or 0)
    return TrainingPlan(
        **given,
        global_batches_per_epoch=global_batches,
        iterations_per_epoch=iterations,
        last_batch_size=(sizes[used - 1] if sizes and used else None),
        padding_batches_per_epoch=0 if limited else rounds * world_size - global_batches,
        optimizer_steps_per_epoch=steps_per_epoch,
        last_window_batches=iterations - (steps_per_epoch - 1) * accumulate
        if steps_per_epoch
        else 0,
        items_per_epoch=items_epoch,
        items_per_step=items_step,
        last_step_items=last_items,
        total_optimizer_steps=total,
        epochs=round(total / steps_per_epoch, 4) if steps_per_epoch else 0.0,
        examples_seen=examples,
        unknown=unknown,
    )


def describe_loader(loader: Any) -> dict[str, Any]:
    """What the plan can read off a train loader: sizes, batch size, drop_last, and what not."""
    sampler = getattr(loader, "batch_sampler", None)
    base = sampler.batches if isinstance(sampler, ShardedBatchSampler) else sampler
    out: dict[str, Any] = {"dataset_size": None, "micro_batch": None, "drop_last": False}
    out["with_replacement"] = _with_replacement(base)
    unknown: list[str] = []
    if isinstance(base, BatchSampler):
        out["micro_batch"] = base.batch_size
        out["drop_last"] = base.drop_last
        try:
            out["dataset_size"] = len(base.sampler)  # type: ignore[arg-type]
        except TypeError:
            unknown.append("the dataset size (its sampler has no length)")
    elif base is not None:
        try:
            out["global_batches"] = len(base)
        except TypeError:
            unknown.append(f"the epoch length ({type(base).__name__} has no length)")
        unknown.append(f"the batch size ({type(base).__name__} chooses it per batch)")
    elif isinstance(loader, DataLoader):
        out["micro_batch"] = loader.batch_size
        try:
            out["rank_batches"] = len(loader)  # the dataset's own per-rank share
        except TypeError:
            unknown.append(
                f"the epoch length ({type(loader.dataset).__name__} is an iterable dataset "
                "without __len__)"
            )
    else:
        unknown.append(f"the epoch length ({type(loader).__name__} is not a DataLoader)")
    out["unknown"] = tuple(unknown)
    return out


def _with_replacement(sampler: Any) -> bool:
    """Whether the sampler, or one it wraps, draws with replacement."""
    while sampler is not None:
        if getattr(sampler, "replacement", False) is True:
            return True
        sampler = getattr(sampler, "sampler", None)
    return False
