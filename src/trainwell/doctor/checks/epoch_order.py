"""data.epoch_order: does every epoch make a full pass over the data, in a new order?

The check draws two epochs from the real train loader the way Lightning would (its `set_epoch`
call first) and compares the two streams of samples: by dataset index where the loader has a
sampler over a map-style dataset, by content everywhere else (iterable datasets, datasets that
yield whole batches, any other iterable of batches). A sampler without `set_epoch`, an iterable
dataset that reseeds its shuffle the same way every epoch, or batches shuffled once at setup
repeat one order; an iterator made once and exhausted leaves the second epoch short or empty.
"""

from __future__ import annotations

from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.samples import order_source, two_epochs, why_not_indexable
from trainwell.doctor.report.verdict import Verdict, fails, passes, warns


def _short(first: list[int], second: list[int], evidence: dict[str, Any]) -> Verdict | None:
    """A fail when the second epoch yields fewer samples than the first (a full pass each)."""
    if not first or len(second) < len(first):
        return fails(
            f"iterated again, the training loader yields {len(first)} samples and then "
            f"{len(second)}, so later epochs are short or empty: a sampler's or dataset's "
            "iterator is made once and runs dry (an __iter__ that returns a generator built in "
            "__init__); build the iterator inside __iter__"
        )
    return None


def _by_content(loader: Any, why: str, evidence: dict[str, Any]) -> Verdict:
    """Two epochs of a loader without sample indices, compared by what they yield."""
    first, second = two_epochs(loader, by_index=False)
    evidence |= {
        "compared_by": "content",
        "why_not_by_index": why,
        "epoch_0_samples": len(first),
        "epoch_1_samples": len(second),
    }
    short = _short(first, second, evidence)
    if short is not None:
        return short
    if first == second and len(first) > 1:
        return warns(
            f"the training loader yields the same {len(first)} samples in the same order in "
            "epoch 0 and epoch 1, so every epoch repeats one order (a shuffle seeded the same "
            "way each epoch, or batches shuffled once at setup); draw the order from the "
            "global RNG or from seed + epoch, unless the stream is meant to be sequential"
        )
    return passes("the training loader yields a new order every epoch")


def data_epoch_order(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    loader = ctx.samples.loader
    problem = why_not_indexable(loader)
    if problem:
        return _by_content(loader, problem, evidence)
    source = order_source(loader)
    first, second = two_epochs(loader, by_index=True)
    has_set_epoch = callable(getattr(source, "set_epoch", None))
    evidence |= {
        "compared_by": "index",
        "order_from": type(source).__name__,
        "order_source_has_set_epoch": has_set_epoch,
        "indices_compared": len(first),
        "epoch_1_indices_compared": len(second),
        "epoch_0_head": first[:8],
        "epoch_1_head": second[:8],
    }
    short = _short(first, second, evidence)
    if short is not None:
        return short
    shuffled = first != sorted(first)
    if first == second and shuffled and len(first) > 1:
        name = type(source).__name__
        cause = (
            f"{name} has set_epoch, but its order ignores the epoch"
            if has_set_epoch
            else f"{name} defines no set_epoch(epoch), the call Lightning makes at every epoch "
            "start"
        )
        return warns(
            f"the training loader draws the same shuffled order in epoch 0 and epoch 1 (first "
            f"{len(first)} indices identical): {cause}, so every epoch repeats one order; seed "
            "the shuffle from seed + epoch in a set_epoch method, or use RandomSampler / "
            "DistributedSampler"
        )
    if first == second:
        return passes(
            f"the training loader draws the samples in index order every epoch "
            f"({type(source).__name__}): "
            "no shuffle to repeat"
        )
    return passes(
        f"the training loader draws a new order every epoch (from {type(source).__name__})"
    )
