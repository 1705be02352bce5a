"""data.epoch_order and data.batch_composition: what the train loader serves, epoch by epoch
and batch by batch."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import class_target, no_classes
from trainwell.doctor.harness.samples import batch_source, order_source, two_epochs
from trainwell.doctor.harness.scan import scan
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns
from trainwell.errors import TrainwellError
from trainwell.loading.labels import dataset_labels

REACH = 0.1  # distinct samples an epoch draws, as a share of what it could, below which it fails


def data_epoch_order(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    loader, by_index = ctx.samples.loader, ctx.samples.indexable
    first, second = two_epochs(loader, by_index=by_index)
    if by_index:
        source = order_source(loader)
        name, has_set_epoch = type(source).__name__, callable(getattr(source, "set_epoch", None))
        evidence |= {
            "compared_by": "index",
            "order_from": name,
            "order_source_has_set_epoch": has_set_epoch,
            "indices_compared": len(first),
            "epoch_1_indices_compared": len(second),
            "epoch_0_head": first[:8],
            "epoch_1_head": second[:8],
        }
    else:  # no sample indices: the two epochs are compared by what they yield
        evidence |= {"compared_by": "content", "why_not_by_index": ctx.samples.why_not_indexable}
        evidence |= {"epoch_0_samples": len(first), "epoch_1_samples": len(second)}
    if not first or len(second) < len(first):
        return fails(
            f"iterated again, the training loader yields {len(first)} samples and then "
            f"{len(second)}, so later epochs are short or empty: a sampler's or dataset's "
            "iterator is made once and runs dry (an __iter__ that returns a generator built in "
            "__init__); build the iterator inside __iter__"
        )
    size = len(loader.dataset) if by_index and hasattr(loader.dataset, "__len__") else 0
    reach = len(set(first))
    if reach < REACH * min(len(first), size):
        evidence |= {"distinct_indices_drawn": reach, "dataset_size": size}
        return fails(
            f"an epoch of {name} draws {len(first)} indices but only {reach} distinct samples of "
            f"{size} (indices {min(first)} to {max(first)}): it was handed weights or indices of "
            "something else (one weight per class where WeightedRandomSampler wants one per "
            "sample, the labels as indices); give it one weight or index per sample"
        )
    if not by_index:
        if first == second and len(first) > 1:
            return warns(
                f"the training loader yields the same {len(first)} samples in the same order in "
                "epoch 0 and epoch 1, so every epoch repeats one order (a shuffle seeded the same "
                "way each epoch, or batches shuffled once at setup); draw the order from the "
                "global RNG or from seed + epoch, unless the stream is meant to be sequential"
            )
        return passes("the training loader yields a new order every epoch")
    shuffled = first != sorted(first)
    if first == second and shuffled and len(first) > 1:
        cause = (
            f"{name} has set_epoch, but its order ignores the epoch"
            if has_set_epoch
            else f"{name} defines no set_epoch(epoch), the call Lightning makes at every epoch start"
        )
        return warns(
            "the training loader draws the same shuffled order in epoch 0 and epoch 1 (first "
            f"{len(first)} indices identical): {cause}, so every epoch repeats one order; seed "
            "the shuffle from seed + epoch in set_epoch, or use RandomSampler / DistributedSampler"
        )
    if first == second:
        return passes(
            f"the training loader draws the samples in index order every epoch ({name}): "
            "no shuffle to repeat"
        )
    return passes(f"the training loader draws a new order every epoch (from {name})")


BATCHES = 64  # training batches compared
SINGLE = 0.5  # share of batches holding one class from which it fails (random: near 0)
PURER = 0.3  # the mean share of a batch's largest class above random's from which it warns


def _purity(batches: list[torch.Tensor]) -> torch.Tensor:
    return torch.tensor([float(torch.bincount(b).max()) / len(b) for b in batches])


def _random_batches(labels: torch.Tensor, sizes: list[int], seed: int) -> list[torch.Tensor]:
    order = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))]
    out, at = [], 0
    for n in sizes:
        if at + n > len(order):
            at = 0
        out.append(order[at : at + n])
        at += n
    return out


def _setting(loader: Any) -> str:
    """The loader setting that serves the set in its stored order."""
    if not isinstance(loader, DataLoader):
        return f"the train loader ({type(loader).__name__}) serves the samples in stored order"
    data = type(loader.dataset).__name__
    if isinstance(loader.dataset, IterableDataset):
        return (
            f"the iterable {data} yields its samples in the order of its source: interleave "
            "its sources or shuffle through a buffer"
        )
    if loader.batch_sampler is None:
        return f"{data} yields ready-made batches (batch_size=None): build them from all classes"
    if type(batch_source(loader)) is not BatchSampler:
        return (
            f"its batch_sampler {type(batch_source(loader)).__name__} builds each batch from "
            "few classes: draw every batch from the whole set"
        )
    if isinstance(order_source(loader), SequentialSampler):
        return (
            f"the train DataLoader has shuffle=False (a SequentialSampler) over {data}, which is "
            "stored in class order: set shuffle=True"
        )
    return f"its sampler {type(order_source(loader)).__name__} draws the set in class order"


def data_batch_composition(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    if values := no_classes(ctx):
        return skips(f"{values}: no classes to compare batches by")
    path, s, loader = class_target(ctx), scan(ctx), ctx.samples.loader
    batches = s.ints.get(path, [])[:BATCHES]
    if any(len(b) != n for b, n in zip(batches, s.train_rows, strict=False)):
        batches = []  # not one class id per sample (labels per position, say)
    batches = [b[b >= 0] for b in batches if bool((b >= 0).any())]  # -100: no class
    if len(batches) < 2:
        return skips(
            f"no class id per sample in the training batches ({path}) to compare: pass the "
            "class ids to a cross-entropy loss, or yield (input, class id) pairs"
        )
    try:
        labels = dataset_labels(loader.dataset) if ctx.samples.indexable else None
    except TrainwellError:
        labels = None
    whole = labels if labels is not None else torch.cat(batches)
    whole = whole[whole >= 0]
    if len(whole.unique()) < 2:
        return skips("the training split holds one class: no composition to compare")
    sizes = [len(b) for b in batches]
    seen, chance = _purity(batches), _purity(_random_batches(whole, sizes, int(ctx.cfg.seed)))
    single = float((seen == 1).float().mean())
    evidence |= {
        "labels": path,
        "batches_compared": len(batches),
        "largest_class_share_per_batch": [round(float(v), 3) for v in seen[:16]],
        "mean_largest_class_share": float(seen.mean()),
        "random_batches_mean_largest_class_share": float(chance.mean()),
        "one_class_batches": single,
        "random_one_class_batches": float((chance == 1).float().mean()),
        "classes_in_the_set": len(whole.unique()),
    }
    if single >= SINGLE and evidence["random_one_class_batches"] < SINGLE / 5:
        verdict = fails
        how = f"{single:.0%} of the first {len(batches)} training batches hold one class"
    elif float(seen.mean() - chance.mean()) >= PURER:
        verdict = warns
        how = (
            f"the first {len(batches)} training batches are {seen.mean():.0%} their largest "
            f"class on average, random batches of the set {chance.mean():.0%}"
        )
    else:
        return passes(
            f"training batches hold the set's classes as random batches do (largest class "
            f"{seen.mean():.0%} of a batch, {chance.mean():.0%} at random)"
        )
    first, second = two_epochs(loader, by_index=ctx.samples.indexable)
    repeats = first == second
    evidence["same_order_every_epoch"] = repeats
    again = ", in the same order every epoch" if repeats else ""
    return verdict(
        f"{how}{again}, so each step fits a few classes and the model swings between them: "
        f"{_setting(loader)}"
    )
