"""The data scan several checks read: every tensor of the first batches of every split, as the
real loaders yield them, with per split each feature's moments (float inputs) or id counts at
real positions (token ids); train's also in two alternating halves (two draws' spread)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch
import torch.nn.functional as F
from lightning.fabric.utilities.data import sized_len

from trainwell.doctor.harness.batches import integral, leaves, padding_positions, size_of
from trainwell.doctor.harness.context import DoctorContext, shared_probe
from trainwell.doctor.harness.samples import iterate_batches, split_loaders

SPLITS = ("train", "val", "test")
LABEL_LIMIT = 5_000_000  # integer target values kept by the scan for targets.contract


def loader_length(loader: Any) -> int | None:
    # several loaders: Lightning decides how they combine
    return None if isinstance(loader, dict | list | tuple) else sized_len(loader)


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
    # split (train's halves: "train/0", "train/1") -> input path -> `_moments` per feature, or
    # id counts for token ids (None: shapes that differ between batches)
    moments: dict[str, dict[str, torch.Tensor | None]] = field(default_factory=dict)
    ids: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)  # per split, as `moments` keys them
    train_rows: list[int] = field(default_factory=list)  # samples per scanned train batch

    def values(self, path: str) -> torch.Tensor | None:
        return torch.cat(parts) if (parts := self.ints.get(path)) else None


@shared_probe
def scan(ctx: DoctorContext) -> Scan:
    """Up to probe.scan_batches batches per split (train's in its order, with augmentation)."""
    limit, result = ctx.settings.scan_batches, Scan()
    train = ([ctx.samples.loader], "")
    for split in SPLITS:
        loaders, why = train if split == "train" else split_loaders(ctx.datamodule, split)
        if not loaders:
            result.missing[split] = why
            continue
        lengths = [loader_length(loader) for loader in loaders]
        result.total_batches[split] = None if None in lengths else sum(lengths)  # type: ignore[arg-type]
        result.batches[split] = 0
        for loader in loaders:
            for i, batch in enumerate(islice(iterate_batches(loader), limit)):
                result.batches[split] += 1
                _scan_batch(result, split, i, batch)
    return result


def _moments(t: torch.Tensor) -> torch.Tensor:
    """(count, sums of the first four powers) of each feature's finite values: dim 1 of a batch
    (the fourth: how heavy the tails are, what a spread drawn from few samples can vary by)."""
    v = t.detach().double().reshape(t.shape[0], t.shape[1] if t.dim() > 1 else 1, -1)
    v = v.transpose(0, 1).reshape(v.shape[1], -1)
    finite = v.isfinite()
    v = v.where(finite, 0.0)
    return torch.stack([finite.sum(1).double(), *((v**k).sum(1) for k in (1, 2, 3, 4))])


def _scan_batch(result: Scan, split: str, index: int, batch: Any) -> None:
    """Count the batch's non-finite values and keep train's integer values; add its per-sample
    inputs to the split's moments and id counts (and to one of train's two halves)."""
    rows, padding = size_of(batch), padding_positions(batch)
    for key in [split, f"train/{index % 2}"][: 2 if split == "train" else 1]:
        result.samples[key] = result.samples.get(key, 0) + (rows or 0)
        for path, t in leaves(batch):
            if not t.dim() or t.shape[0] != rows or t.dtype == torch.bool or t.is_complex():
                continue
            if t.is_floating_point():
                moments, new = result.moments.setdefault(key, {}), _moments(t)
                old = moments.get(path, torch.zeros_like(new))  # None: shapes already differ
                moments[path] = old + new if old is not None and old.shape == new.shape else None
            elif t.dim() >= 2:
                real = t if padding is None or padding.pad.shape != t.shape else t[~padding.pad]
                real = real[real >= 0].reshape(-1).cpu()  # negative ids: ignore_index labels
                counts = result.ids.setdefault(key, {})
                old = counts.get(path, torch.zeros(0, dtype=torch.long))
                new = torch.bincount(real, minlength=len(old))
                counts[path] = F.pad(old, (0, len(new) - len(old))) + new
    if split == "train":
        result.train_rows.append(rows or 0)
    flagged = False
    for path, tensor in leaves(batch):
        floating = tensor.is_floating_point()
        nan, inf = (int(f(tensor).sum()) if floating else 0 for f in (torch.isnan, torch.isinf))
        if (nan or inf) and result.first_bad is None:
            result.first_bad = dict(split=split, batch=index, part=path, nan=nan, inf=inf)
        flagged = flagged or bool(nan or inf)
        if split == "train":
            result.dtypes.setdefault(path, str(tensor.dtype))
            if integral(tensor) and result.kept < LABEL_LIMIT:
                result.ints.setdefault(path, []).append(tensor.detach().reshape(-1).cpu())
                result.kept += tensor.numel()
    result.bad_batches += flagged
