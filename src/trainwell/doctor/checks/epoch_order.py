"""data.epoch_order: does the training loader visit the samples in a new order every epoch?

A sampler that shuffles from a generator seeded with `seed + epoch` (DistributedSampler, and
the many samplers written after it) only changes its order when `set_epoch` is called. Lightning
calls `set_epoch` at every epoch start on the loader's sampler and its batch sampler's sampler,
when they define it; a sampler without it, or one that ignores it, repeats epoch 0's shuffled
order for the whole run. The check draws two epochs' orders the way Lightning would.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from torch.utils.data import DataLoader

from trainwell import compat
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.samples import why_not_indexable
from trainwell.doctor.report.verdict import Check

ID = "data.epoch_order"
COMPARED = 4096  # indices compared per epoch: enough to tell a repeat, cheap on any dataset


def _chain(loader: DataLoader) -> list[Any]:
    """The loader's batch sampler, sampler and what they wrap (`sampler`, `batches`), outermost
    first: the last one is the sampler whose order the rest pass on."""
    chain: list[Any] = []
    todo = [loader.batch_sampler, loader.sampler]
    while todo:
        obj = todo.pop(0)
        if obj is None or any(obj is seen for seen in chain):
            continue
        chain.append(obj)
        todo += [getattr(obj, "batches", None), getattr(obj, "sampler", None)]
    return chain


def _order(loader: DataLoader, epoch: int) -> list[int]:
    """The first indices the loader would draw in `epoch`, after Lightning's set_epoch call."""
    compat.set_sampler_epoch(loader, epoch)
    flat = (int(i) for batch in loader.batch_sampler for i in batch)  # type: ignore[union-attr]
    return list(islice(flat, COMPARED))


def data_epoch_order(ctx: DoctorContext) -> Check:
    loader = ctx.samples.loader
    problem = why_not_indexable(loader)
    if problem:
        return Check(ID, "skip", f"{problem}: no sampler order to compare across epochs")
    chain = _chain(loader)
    kinds = [type(s).__name__ for s in chain]
    source = chain[-1]
    try:
        first, second = _order(loader, 0), _order(loader, 1)
    finally:
        # Leave the sampler as the run will find it: Lightning sets epoch 0 first.
        compat.set_sampler_epoch(loader, 0)
    has_set_epoch = callable(getattr(source, "set_epoch", None))
    evidence: dict[str, Any] = {
        "samplers": kinds,
        "order_from": type(source).__name__,
        "order_source_has_set_epoch": has_set_epoch,
        "indices_compared": len(first),
        "epoch_0_head": first[:8],
        "epoch_1_head": second[:8],
    }
    shuffled = first != sorted(first)
    if first == second and shuffled and len(first) > 1:
        name = type(source).__name__
        cause = (
            f"{name} has set_epoch, but its order ignores the epoch"
            if has_set_epoch
            else f"{name} defines no set_epoch(epoch), the call Lightning makes at every epoch "
            "start"
        )
        return Check(
            ID,
            "warn",
            f"the training loader draws the same shuffled order in epoch 0 and epoch 1 (first "
            f"{len(first)} indices identical): {cause}, so every epoch repeats one order; seed "
            "the shuffle from seed + epoch in a set_epoch method, or use RandomSampler / "
            "DistributedSampler",
            evidence,
        )
    if first == second:
        return Check(
            ID,
            "pass",
            f"the training loader draws the samples in index order every epoch ({kinds[-1]}): "
            "no shuffle to repeat",
            evidence,
        )
    return Check(
        ID,
        "pass",
        f"the training loader draws a new order every epoch (from {type(source).__name__})",
        evidence,
    )
