"""Data checks: finite values, split leakage, loading throughput, worker seeding."""

from __future__ import annotations

import functools
import hashlib
import os
import statistics
from dataclasses import dataclass, field

import torch
from lightning.fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader, Dataset, Subset

from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.report.verdict import Check


@dataclass
class Scan:
    batches: dict[str, int] = field(default_factory=dict)
    total_batches: dict[str, int] = field(default_factory=dict)
    first_bad: dict | None = None
    bad_batches: int = 0
    labels: torch.Tensor | None = None
    label_dtype: str = "unknown"


def _bad(t: object) -> tuple[int, int]:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return 0, 0
    return int(torch.isnan(t).sum()), int(torch.isinf(t).sum())


def scan(ctx: DoctorContext) -> Scan:
    """Walk the real loaders (train order and augmentation included), up to probe.scan_batches."""
    cached = ctx.__dict__.get("_scan")
    if cached is not None:
        return cached
    dm, limit = ctx.datamodule, ctx.settings.scan_batches
    result, labels = Scan(), []
    for split in ("train", "val", "test"):
        try:
            loader = getattr(dm, f"{split}_dataloader")()
        except Exception:  # a datamodule without this split: nothing to scan
            continue
        result.total_batches[split] = len(loader)
        seen = 0
        for i, batch in enumerate(loader):
            if i >= limit:
                break
            seen += 1
            x, y = batch[0], batch[1]
            for part, tensor in (("inputs", x), ("targets", y)):
                nan, inf = _bad(tensor)
                if nan or inf:
                    result.bad_batches += 1
                    if result.first_bad is None:
                        result.first_bad = dict(split=split, batch=i, part=part, nan=nan, inf=inf)
            if split == "train" and isinstance(y, torch.Tensor):
                labels.append(y.detach().reshape(len(y), -1) if y.dim() > 1 else y.detach())
        result.batches[split] = seen
    if labels:
        result.labels = torch.cat(labels)
        result.label_dtype = str(result.labels.dtype)
    ctx.__dict__["_scan"] = result
    return result


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


def _hashes(dataset: Dataset, limit: int) -> dict[str, int]:
    """Digest of each sample's inputs -> its index (TensorDatasets are hashed without collation)."""
    out: dict[str, int] = {}
    tensors = getattr(dataset, "tensors", None)
    n = min(len(dataset), limit)  # type: ignore[arg-type]
    if tensors is not None:
        flat = tensors[0][:n].reshape(n, -1).contiguous().numpy()
        for i in range(n):
            out.setdefault(hashlib.blake2b(flat[i].tobytes(), digest_size=16).hexdigest(), i)
        return out
    for i in range(n):
        x = dataset[i][0]
        data = x.numpy().tobytes() if isinstance(x, torch.Tensor) else repr(x).encode()
        out.setdefault(hashlib.blake2b(data, digest_size=16).hexdigest(), i)
    return out


def data_leakage(ctx: DoctorContext) -> Check:
    dm = ctx.datamodule
    splits = {s: getattr(dm, f"{s}_set", None) for s in ("train", "val", "test")}
    if splits["train"] is None:
        return Check("data.leakage", "skip", "the datamodule exposes no train_set to compare")
    limit = ctx.settings.leakage_max_samples
    train = _hashes(splits["train"], limit)
    evidence: dict = {"train_samples_hashed": len(train)}
    overlaps = {}
    for split in ("val", "test"):
        if splits[split] is None:
            continue
        other = _hashes(splits[split], limit)
        shared = [h for h in other if h in train]
        evidence[f"{split}_samples_hashed"] = len(other)
        evidence[f"{split}_overlap"] = len(shared)
        if shared:
            overlaps[split] = (len(shared), len(other))
    if overlaps:
        split, (count, total) = max(overlaps.items(), key=lambda kv: kv[1][0])
        return Check(
            "data.leakage",
            "fail",
            f"{count} of {total} {split} samples are identical to train samples, so {split} "
            "metrics measure memorisation; split the data before any duplication or augmentation",
            evidence,
        )
    return Check("data.leakage", "pass", "no sample is shared between train and val/test", evidence)


def data_throughput(ctx: DoctorContext) -> Check:
    """Time a short real fit on the real train loader: how much of each step waits for data?"""
    n = ctx.settings.throughput_batches
    loader = ctx.datamodule.train_dataloader()
    n = min(n, len(loader))
    if n < 2:
        return Check("data.throughput", "skip", f"the train loader has only {len(loader)} batch")
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
        "raise data.num_workers"
        if getattr(loader, "num_workers", 0) < 2
        else "make __getitem__ cheaper (cache decoded samples)"
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
    dm = ctx.datamodule
    real = dm.train_dataloader()
    workers = real.num_workers
    if workers < 2:
        return Check(
            "data.worker_seeding",
            "skip",
            f"data.num_workers={workers}: no worker processes whose random state could repeat",
            {"num_workers": workers},
        )
    per_worker = 2
    probe = DataLoader(
        Subset(real.dataset, [0] * (per_worker * workers)),
        batch_size=per_worker,
        num_workers=workers,
        worker_init_fn=real.worker_init_fn,
        generator=real.generator,
    )
    _add_lightning_worker_init(probe)
    with quiet():
        batches = [b[0] for b in probe]
    within = not torch.equal(batches[0][0], batches[0][1])
    across = torch.equal(batches[0], batches[1])
    evidence = {
        "num_workers": workers,
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
