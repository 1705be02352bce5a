"""Data checks on the values themselves: finite inputs and targets, no sample shared across splits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from trainwell.doctor.harness.batches import leaves
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.samples import (
    content,
    iterate_batches,
    split_loaders,
)
from trainwell.doctor.report.verdict import Check

SPLITS = ("train", "val", "test")
LABEL_LIMIT = 5_000_000  # integer target values kept by the scan for targets.contract


def _loaders(ctx: DoctorContext, split: str) -> tuple[list[Any], str]:
    if split == "train":
        return [ctx.samples.loader], ""
    return split_loaders(ctx.datamodule, split)


def loader_length(loader: Any) -> int | None:
    if isinstance(loader, dict | list | tuple):
        return None  # several loaders: Lightning decides how they combine
    try:
        return len(loader)
    except TypeError:  # an iterable without a length
        return None


@dataclass
class Scan:
    batches: dict[str, int] = field(default_factory=dict)
    total_batches: dict[str, int | None] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # split -> why it was not scanned
    first_bad: dict | None = None
    bad_batches: int = 0
    dtypes: dict[str, str] = field(default_factory=dict)  # train batch leaf -> dtype
    ints: dict[str, list[torch.Tensor]] = field(default_factory=dict)  # integer train leaves
    kept: int = 0

    def values(self, path: str) -> torch.Tensor | None:
        parts = self.ints.get(path)
        return torch.cat(parts) if parts else None


def _bad(t: torch.Tensor) -> tuple[int, int]:
    if not t.is_floating_point():
        return 0, 0
    return int(torch.isnan(t).sum()), int(torch.isinf(t).sum())


def scan(ctx: DoctorContext) -> Scan:
    """Walk the real loaders (train order and augmentation included), up to probe.scan_batches
    per split: every tensor of every batch, whatever the batch's structure."""
    cached = ctx.__dict__.get("_scan")
    if cached is not None:
        return cached
    limit = ctx.settings.scan_batches
    result = Scan()
    for split in SPLITS:
        loaders, why = _loaders(ctx, split)
        if not loaders:
            result.missing[split] = why
            continue
        lengths = [loader_length(loader) for loader in loaders]
        result.total_batches[split] = None if None in lengths else sum(lengths)  # type: ignore[arg-type]
        seen = 0
        for loader in loaders:
            for i, batch in enumerate(iterate_batches(loader)):
                if i >= limit:
                    break
                seen += 1
                _scan_batch(result, split, i, batch)
        result.batches[split] = seen
    ctx.__dict__["_scan"] = result
    return result


def _scan_batch(result: Scan, split: str, index: int, batch: Any) -> None:
    flagged = False
    for path, tensor in leaves(batch):
        nan, inf = _bad(tensor)
        if (nan or inf) and result.first_bad is None:
            result.first_bad = dict(split=split, batch=index, part=path, nan=nan, inf=inf)
        flagged = flagged or bool(nan or inf)
        if split == "train":
            result.dtypes.setdefault(path, str(tensor.dtype))
            integral = not tensor.is_floating_point() and not tensor.is_complex()
            if integral and tensor.dtype != torch.bool and result.kept < LABEL_LIMIT:
                result.ints.setdefault(path, []).append(tensor.detach().reshape(-1).cpu())
                result.kept += tensor.numel()
    result.bad_batches += flagged


def data_finite(ctx: DoctorContext) -> Check:
    s = scan(ctx)
    evidence = {"batches_scanned": s.batches, "batches_total": s.total_batches}
    if s.first_bad is not None:
        b = s.first_bad
        evidence |= {"first_bad": b, "bad_batches": s.bad_batches}
        return Check(
            "data.finite",
            "fail",
            f"{b['split']} batch {b['batch']} holds {b['nan']} NaN and {b['inf']} Inf value(s) in "
            f"its {b['part']} ({s.bad_batches} bad batch(es) scanned), which turns the loss into NaN; "
            "clean or impute them in the dataset",
            evidence,
        )
    return Check("data.finite", "pass", "every scanned batch is finite", evidence)


def _inputs(sample: Any) -> Any:
    """What identifies a sample: the input of an (input, target) pair, the whole sample else."""
    if isinstance(sample, tuple | list) and len(sample) == 2:
        return sample[0]
    return sample


# Above this share of a split found in train, the split was copied or drawn from train; below,
# duplicates are the kind real data sets hold (the same digit drawn twice, a repeated sentence).
LEAK_FRACTION = 0.1


def _overlap_verdict(overlaps: dict[str, tuple[int, int]], evidence: dict[str, Any]) -> Check:
    split, (count, total) = max(overlaps.items(), key=lambda kv: kv[1][0] / max(kv[1][1], 1))
    fraction = count / max(total, 1)
    evidence["leak_fraction_threshold"] = LEAK_FRACTION
    if fraction >= LEAK_FRACTION:
        return Check(
            "data.leakage",
            "fail",
            f"{count} of {total} {split} samples ({fraction:.0%}) are identical to train "
            f"samples, so {split} metrics measure memorisation; split the data before any "
            "duplication or augmentation",
            evidence,
        )
    return Check(
        "data.leakage",
        "warn",
        f"{count} of {total} {split} samples ({fraction:.1%}) are identical to train samples: "
        "few enough to be natural duplicates, but they inflate the metric by up to that share; "
        "drop them from the split if the data allows",
        evidence,
    )


def data_leakage(ctx: DoctorContext) -> Check:
    # Every split is compared by the samples its loaders yield in one pass: a map-style dataset,
    # an iterable one or a custom loader, all hashed the same way.
    limit = ctx.settings.leakage_max_samples
    train_hashes = set(content(ctx.samples.loader, limit, _inputs))
    evidence: dict[str, Any] = {
        "max_samples_per_split": limit,
        "train_samples_hashed": len(train_hashes),
    }
    overlaps = {}
    compared = []
    for split in ("val", "test"):
        loaders, why = split_loaders(ctx.datamodule, split)
        other = {h for loader in loaders for h in content(loader, limit, _inputs)}
        if not other:
            evidence[f"{split}_not_compared"] = why
            continue
        compared.append(split)
        shared = [h for h in other if h in train_hashes]
        evidence[f"{split}_samples_hashed"] = len(other)
        evidence[f"{split}_overlap"] = len(shared)
        if shared:
            overlaps[split] = (len(shared), len(other))
    if not compared:
        return Check(
            "data.leakage",
            "skip",
            f"no val or test split to compare with train ({evidence.get('val_not_compared')})",
            evidence,
        )
    if overlaps:
        return _overlap_verdict(overlaps, evidence)
    return Check(
        "data.leakage",
        "pass",
        f"no sample is shared between train and {'/'.join(compared)}",
        evidence,
    )
