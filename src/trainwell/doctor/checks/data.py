"""Data checks on the values themselves: finite inputs and targets, no sample shared across splits."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.samples import content, split_loaders
from trainwell.doctor.harness.scan import scan
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns


def data_finite(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    s = scan(ctx)
    evidence |= {"batches_scanned": s.batches, "batches_total": s.total_batches}
    if s.first_bad is not None:
        b = s.first_bad
        evidence |= {"first_bad": b, "bad_batches": s.bad_batches}
        return fails(
            f"{b['split']} batch {b['batch']} holds {b['nan']} NaN and {b['inf']} Inf value(s) in "
            f"its {b['part']} ({s.bad_batches} bad batch(es) scanned), which turns the loss into NaN; "
            "clean or impute them in the dataset"
        )
    return passes("every scanned batch is finite")


def _inputs(sample: Any) -> Any:
    """What identifies a sample: the input of an (input, target) pair, the whole sample else."""
    if isinstance(sample, tuple | list) and len(sample) == 2:
        return sample[0]
    return sample


# Above this share of a split found in train, the split was copied or drawn from train; below,
# duplicates are the kind real data sets hold (the same digit drawn twice, a repeated sentence).
LEAK_FRACTION = 0.1


def _overlap_verdict(overlaps: dict[str, tuple[int, int]], evidence: dict[str, Any]) -> Verdict:
    split, (count, total) = max(overlaps.items(), key=lambda kv: kv[1][0] / max(kv[1][1], 1))
    fraction = count / max(total, 1)
    evidence["leak_fraction_threshold"] = LEAK_FRACTION
    if fraction >= LEAK_FRACTION:
        return fails(
            f"{count} of {total} {split} samples ({fraction:.0%}) are identical to train "
            f"samples, so {split} metrics measure memorisation; split the data before any "
            "duplication or augmentation"
        )
    return warns(
        f"{count} of {total} {split} samples ({fraction:.1%}) are identical to train samples: "
        "few enough to be natural duplicates, but they inflate the metric by up to that share; "
        "drop them from the split if the data allows"
    )


def data_leakage(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    # Every split is compared by the samples its loaders yield in one pass: a map-style dataset,
    # an iterable one or a custom loader, all hashed the same way.
    limit = ctx.settings.leakage_max_samples
    train_hashes = set(content(ctx.samples.loader, limit, _inputs))
    evidence |= {
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
        return skips(
            f"no val or test split to compare with train ({evidence.get('val_not_compared')})"
        )
    if overlaps:
        return _overlap_verdict(overlaps, evidence)
    return passes(f"no sample is shared between train and {'/'.join(compared)}")
