"""Data checks: finite values, split leakage, loading throughput, worker seeding."""

from __future__ import annotations

import functools
import hashlib
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from lightning.fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader, Dataset, Subset

from trainwell.doctor.harness.batches import leaves
from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.harness.samples import iterate_batches, split_loaders, why_not_indexable
from trainwell.doctor.report.verdict import Check

SPLITS = ("train", "val", "test")
MIN_WAIT_S = 0.005  # a batch that waits less than this for data is not worth a verdict
LABEL_LIMIT = 5_000_000  # integer target values kept by the scan for targets.contract


def _loaders(ctx: DoctorContext, split: str) -> tuple[list[Any], str]:
    if split == "train":
        return [ctx.samples.loader], ""
    return split_loaders(ctx.datamodule, split)


def _length(loader: Any) -> int | None:
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
        lengths = [_length(loader) for loader in loaders]
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


def _digest(value: Any, out: Any) -> None:
    """Feed a sample's content (any structure) into a hash."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().contiguous()
        out.update(f"{value.dtype}{tuple(value.shape)}".encode())
        if value.dtype == torch.bfloat16:  # numpy has no bfloat16: hash the same bits as int16
            value = value.view(torch.int16)
        out.update(value.numpy().tobytes())
    elif isinstance(value, np.ndarray):
        out.update(f"{value.dtype}{value.shape}".encode())
        out.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            out.update(str(key).encode())
            _digest(value[key], out)
    elif isinstance(value, list | tuple):
        for item in value:
            _digest(item, out)
    elif isinstance(value, str | bytes):
        out.update(value.encode() if isinstance(value, str) else value)
    else:
        out.update(repr(value).encode())


def _inputs(sample: Any) -> Any:
    """What identifies a sample: the input of an (input, target) pair, the whole sample else."""
    if isinstance(sample, tuple | list) and len(sample) == 2:
        return sample[0]
    return sample


def _hashes(dataset: Dataset, limit: int) -> dict[str, int]:
    """Digest of each sample's inputs -> its index (TensorDatasets are hashed without collation)."""
    out: dict[str, int] = {}
    tensors = getattr(dataset, "tensors", None)
    n = min(len(dataset), limit)  # type: ignore[arg-type]
    if tensors is not None and len(tensors) == 2:
        flat = tensors[0][:n].reshape(n, -1).contiguous().numpy()
        for i in range(n):
            out.setdefault(hashlib.blake2b(flat[i].tobytes(), digest_size=16).hexdigest(), i)
        return out
    for i in range(n):
        digest = hashlib.blake2b(digest_size=16)
        _digest(_inputs(dataset[i]), digest)
        out.setdefault(digest.hexdigest(), i)
    return out


def _indexable_datasets(ctx: DoctorContext, split: str) -> tuple[list[Dataset], str]:
    loaders, why = _loaders(ctx, split)
    if not loaders:
        return [], why
    datasets = []
    for loader in loaders:
        problem = why_not_indexable(loader)
        if problem:
            return [], problem.replace("the train", f"the {split}")
        datasets.append(loader.dataset)
    return datasets, ""


def data_leakage(ctx: DoctorContext) -> Check:
    train, why = _indexable_datasets(ctx, "train")
    if not train:
        return Check("data.leakage", "skip", f"train samples cannot be compared: {why}")
    limit = ctx.settings.leakage_max_samples
    train_hashes: dict[str, int] = {}
    for dataset in train:
        train_hashes |= _hashes(dataset, limit)
    evidence: dict[str, Any] = {"train_samples_hashed": len(train_hashes)}
    overlaps = {}
    compared = []
    for split in ("val", "test"):
        datasets, why = _indexable_datasets(ctx, split)
        if not datasets:
            evidence[f"{split}_not_compared"] = why
            continue
        compared.append(split)
        other: dict[str, int] = {}
        for dataset in datasets:
            other |= _hashes(dataset, limit)
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
        split, (count, total) = max(overlaps.items(), key=lambda kv: kv[1][0])
        return Check(
            "data.leakage",
            "fail",
            f"{count} of {total} {split} samples are identical to train samples, so {split} "
            "metrics measure memorisation; split the data before any duplication or augmentation",
            evidence,
        )
    return Check(
        "data.leakage",
        "pass",
        f"no sample is shared between train and {'/'.join(compared)}",
        evidence,
    )


def data_throughput(ctx: DoctorContext) -> Check:
    """Time a short real fit on the real train loader: how much of each step waits for data?"""
    n = ctx.settings.throughput_batches
    loader = ctx.datamodule.train_dataloader()
    length = _length(loader)
    n = min(n, length) if length is not None else n
    if n < 2:
        return Check("data.throughput", "skip", f"the train loader has only {length} batch")
    recorder = Recorder()
    task = ctx.make_task()
    k = ctx.accumulate
    fit = ctx.fit(
        task, loader, [recorder], max_steps=max(1, n // k), accumulate=k, limit_train_batches=n
    )
    if fit.error is not None and len(recorder.batch_seconds) < 2:
        return Check("data.throughput", "skip", f"the short fit failed: {fit.error_line}")
    # Waits between batches only: the first fetch (worker start-up) happens before batch 0.
    wait = recorder.wait_seconds
    compute = recorder.batch_seconds
    fraction = sum(wait) / max(1e-9, sum(wait) + sum(compute))
    evidence = {
        "batches_timed": len(recorder.batch_seconds),
        "median_wait_s": statistics.median(wait) if wait else 0.0,
        "median_step_s": statistics.median(compute) if compute else 0.0,
        "data_wait_fraction": round(fraction, 4),
        "num_workers": getattr(loader, "num_workers", 0),
        "pin_memory": getattr(loader, "pin_memory", False),
        "probe_device": ctx.settings.accelerator,
    }
    advice = (
        "raise the DataLoader's num_workers (data.num_workers)"
        if getattr(loader, "num_workers", 0) < 2
        else "make __getitem__ cheaper (cache decoded samples)"
    )
    if fraction > 0.3 and evidence["median_wait_s"] < MIN_WAIT_S:
        # A tiny model on CPU waits for a fast loader most of the time; nothing to gain there.
        return Check(
            "data.throughput",
            "pass",
            f"data wait is {fraction:.0%} of step time on {ctx.settings.accelerator}, but only "
            f"{evidence['median_wait_s'] * 1e3:.2f} ms per batch",
            evidence,
        )
    if fraction > 0.5:
        return Check(
            "data.throughput",
            "fail",
            f"{fraction:.0%} of each step waits for the next batch (data loading is the bottleneck); "
            f"{advice}",
            evidence,
        )
    if fraction > 0.3:
        return Check(
            "data.throughput",
            "warn",
            f"{fraction:.0%} of each step waits for data on {ctx.settings.accelerator}; a faster "
            f"device will wait more: {advice}",
            evidence,
        )
    return Check(
        "data.throughput",
        "pass",
        f"data wait is {fraction:.0%} of step time on {ctx.settings.accelerator}",
        evidence,
    )


def data_worker_seeding(ctx: DoctorContext) -> Check:
    """Draw one sample index repeatedly in two workers: random augmentations must differ."""
    real = ctx.samples.loader
    problem = why_not_indexable(real)
    if problem:
        return Check("data.worker_seeding", "skip", f"{problem}: no index to draw repeatedly")
    workers = real.num_workers
    if workers < 2:
        return Check(
            "data.worker_seeding",
            "skip",
            f"data.num_workers={workers}: no worker processes whose random state could repeat",
            {"num_workers": workers},
        )
    per_worker = 2
    index = next(iter(real.batch_sampler))[0]  # the first sample the loader draws
    probe = DataLoader(
        Subset(real.dataset, [index] * (per_worker * workers)),
        batch_size=per_worker,
        num_workers=workers,
        collate_fn=real.collate_fn,
        worker_init_fn=real.worker_init_fn,
        generator=real.generator,
    )
    _add_lightning_worker_init(probe)
    with quiet():
        batches = [dict(leaves(b)) for b in probe]
    first, second = batches[0], batches[1]
    within = any(
        t.dim() > 0 and len(t) == per_worker and not torch.equal(t[0], t[1]) for t in first.values()
    )
    across = first.keys() == second.keys() and all(
        t.shape == second[p].shape and torch.equal(t, second[p]) for p, t in first.items()
    )
    evidence = {
        "num_workers": workers,
        "sample_index": int(index),
        "random_within_worker": within,
        "identical_across_workers": across,
    }
    if not within:
        return Check(
            "data.worker_seeding",
            "pass",
            "samples are deterministic (no random augmentation), so worker seeds cannot repeat it",
            evidence,
        )
    if across:
        return Check(
            "data.worker_seeding",
            "fail",
            f"all {workers} dataloader workers draw the same random augmentation (they share one "
            "copied RNG state, e.g. numpy's); seed each worker in worker_init_fn from "
            "torch.initial_seed(), or use torch's RNG for augmentation",
            evidence,
        )
    return Check(
        "data.worker_seeding", "pass", f"{workers} workers draw different augmentations", evidence
    )


def _add_lightning_worker_init(loader: DataLoader) -> None:
    """Give the probe loader the worker_init_fn Lightning would add under seed_everything(workers=True)."""
    if loader.worker_init_fn is None and os.environ.get("PL_SEED_WORKERS") == "1":
        loader.worker_init_fn = functools.partial(pl_worker_init_function, rank=0)
