"""eval.coverage: each evaluated split is scored on each of its samples exactly once, read off the
evaluation loaders' own batch samplers by index over two passes (no sample is loaded).
"""

from __future__ import annotations

from collections import Counter
from itertools import islice
from typing import Any

import torch
from lightning.fabric.utilities.data import sized_len
from torch.utils.data import DataLoader

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.samples import batch_source, split_loaders, why_not_indexable
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips

LARGEST = 1_000_000  # samples at most: a larger split is not counted (two passes of indices)


def _pass(loader: DataLoader) -> list[Any]:
    """The indices of one pass of the batch sampler (an endless one is cut at twice the dataset)."""
    # Keys as the dataset takes them (a dict-style dataset's may be strings); tensors by value.
    flat = (i.item() if isinstance(i, torch.Tensor) else i for b in batch_source(loader) for i in b)
    return list(islice(flat, 2 * len(loader.dataset) + 1))


def _finding(loader: DataLoader) -> tuple[str, dict[str, Any]] | None:
    """What keeps this loader from scoring its samples exactly once (None: nothing)."""
    declared = sized_len(getattr(batch_source(loader), "sampler", None))
    with torch.random.fork_rng(devices=[]):  # a random sampler's draws leave the run's RNG be
        first, second = _pass(loader), _pass(loader)
    counts = Counter(first)
    twice = sum(n - 1 for n in counts.values())
    evidence = {"drawn": len(first), "distinct": len(counts), "declared": declared}
    if declared is not None and len(first) < declared:
        lost = declared - len(first)
        how = " (drop_last=True)" if getattr(loader, "drop_last", False) else ""
        return f"drops {lost} of its {declared} samples{how}, so it scores {len(first)}", evidence
    if twice:
        return (
            f"draws {twice} of its {len(first)} indices a second time (a sampler with "
            "replacement, or a last batch filled with repeats), so they count twice",
            evidence,
        )
    if set(first) != set(second):
        return "draws a different subset of its samples on each pass", evidence
    return None


def eval_coverage(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    counted, skipped = [], []
    for split in ("val", "test"):
        loaders, _ = split_loaders(ctx.datamodule, split)
        for n, loader in enumerate(loaders):
            name = f"{split}_dataloader" + (f"[{n}]" if len(loaders) > 1 else "")
            size = None if why_not_indexable(loader) else sized_len(loader.dataset)
            if size is None or size > LARGEST:
                skipped.append(name)
                continue
            found = _finding(loader)
            evidence[name] = found[1] if found else {"samples": size}
            if found:
                return fails(
                    f"the {name} {found[0]}: the logged {split} metrics are not the split's; "
                    f"build evaluation loaders with drop_last=False and no sampler (or a "
                    f"sequential one), each sample once"
                )
            counted.append(name)
    if not counted:
        return skips(
            "no evaluation loader draws its samples by index (none, or iterable datasets: "
            f"{', '.join(skipped) or 'no val_dataloader or test_dataloader'}), so none was counted"
        )
    evidence["not_counted"] = skipped
    return passes(f"{' and '.join(counted)} score each of their samples exactly once per pass")
