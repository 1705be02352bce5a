"""Data checks on loading: does training wait for data, do workers repeat their augmentation?"""

from __future__ import annotations

import functools
import os
import random
import statistics
from typing import Any

import numpy as np
import torch
from lightning.fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader, IterableDataset, Subset

from trainwell.doctor.harness.batches import leaves, same
from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.harness.samples import content, why_not_indexable
from trainwell.doctor.harness.scan import loader_length
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns

MIN_WAIT_S = 0.005  # a batch that waits less than this for data is not worth a verdict
# Samples compared per pass: a whole epoch of a small stream, where workers that shuffle the
# same samples differently still repeat each other; on a longer stream only workers that yield
# the same sequence (a file read in order, a generator seeded before the workers started).
STREAM_COMPARED = 4096
REPEATED = 0.1  # share of a pass that repeats earlier samples, beyond what one process repeats


def data_throughput(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    loader = ctx.datamodule.train_dataloader()
    n, length = ctx.settings.throughput_batches, loader_length(loader)
    n = min(n, length) if length is not None else n
    if n < 2:
        return skips(f"the train loader has only {length} batch")
    measured = _measure(ctx, loader, n)
    if isinstance(measured, str):
        return skips(f"the short fit failed: {measured}")
    span = max(1, getattr(loader, "num_workers", 0) or 0)
    fraction, per_batch = _quietest(*measured, span)
    if fraction > 0.5:
        # A fault repeats; a machine busy for the whole measurement (another process holding
        # the cores while every batch was fetched) does not: the verdict takes the quieter of two.
        again = _measure(ctx, loader, n)
        if not isinstance(again, str) and _quietest(*again, span)[0] < fraction:
            evidence["first_data_wait_fraction"] = round(fraction, 4)
            measured, (fraction, per_batch) = again, _quietest(*again, span)
    wait, compute = measured
    evidence |= {
        "batches_timed": len(compute),
        "batches_per_window": span,
        "median_wait_s": statistics.median(wait) if wait else 0.0,
        "median_step_s": statistics.median(compute) if compute else 0.0,
        "quietest_window_wait_s": per_batch,
        "data_wait_fraction": round(fraction, 4),
        "num_workers": getattr(loader, "num_workers", 0),
        "pin_memory": getattr(loader, "pin_memory", False),
        "probe_device": ctx.settings.accelerator,
    }
    device = ctx.settings.accelerator
    advice = "make __getitem__ cheaper (cache decoded samples)"
    if evidence["num_workers"] < 2:
        advice = "raise the DataLoader's num_workers (data.num_workers)"
    if fraction > 0.3 and per_batch < MIN_WAIT_S:
        # A tiny model on CPU waits for a fast loader most of the time; nothing to gain there.
        return passes(
            f"data wait is {fraction:.0%} of step time on {device}, but only "
            f"{per_batch * 1e3:.2f} ms per batch"
        )
    if fraction > 0.5:
        return fails(
            f"{fraction:.0%} of each step waits for the next batch (data loading is the "
            f"bottleneck); {advice}"
        )
    if fraction > 0.3:
        return warns(
            f"{fraction:.0%} of each step waits for data on {device}; a faster "
            f"device will wait more: {advice}"
        )
    return passes(f"data wait is {fraction:.0%} of step time on {device}")


def _measure(ctx: DoctorContext, loader: Any, n: int) -> tuple[list[float], list[float]] | str:
    """(seconds each batch waited for data, and computed) over `n` batches, or why a fit failed."""
    recorder, task, k = Recorder(), ctx.make_task(), ctx.accumulate
    fit = ctx.fit(
        task, loader, [recorder], max_steps=max(1, n // k), accumulate=k, limit_train_batches=n
    )
    if fit.error is not None and len(recorder.batch_seconds) < 2:
        return fit.error_line
    return recorder.wait_seconds, recorder.batch_seconds


def _quietest(wait: list[float], compute: list[float], span: int) -> tuple[float, float]:
    """(share of time spent waiting for data, seconds waited per batch), each phase read apart (a
    step held up must not hide a slow fetch beside it) in its quietest window of `span` batches (the
    loader's workers, each handing over one batch per round): another process taking the cores only
    adds time, so a busy machine cannot make either look slower than its quietest round, while a
    slow loader is slow in every round."""
    # wait[i] is the gap before the batch that computed compute[i + 1] (batch 0 waited for the
    # loader's start-up, which is not its speed)
    pairs = list(zip(wait, compute[len(compute) - len(wait) :], strict=True))
    if not pairs:
        return 0.0, 0.0
    span = min(span, len(pairs))
    starts = range(len(pairs) - span + 1)
    waits = [sum(w for w, _ in pairs[i : i + span]) for i in starts]
    steps = [sum(c for _, c in pairs[i : i + span]) for i in starts]
    waited, computed = min(waits), min(steps)
    return waited / max(1e-9, waited + computed), waited / span


def global_rng_use(dataset: Any, index: int) -> str:
    """'global' when dataset[index] changes with the global RNGs (torch.rand / random / np.random in
    __getitem__), 'stateful' when it changes between two draws from equal global states (an RNG the
    dataset keeps), '' when it is a function of the sample alone. Restores the global RNGs."""
    saved = random.getstate(), np.random.get_state()
    draws = []
    try:
        with torch.random.fork_rng(devices=[]), quiet():
            for seed in (1234, 1234, 98765):  # dataset[index] with all three RNGs seeded
                torch.default_generator.manual_seed(seed)
                random.seed(seed)
                np.random.seed(seed)
                draws.append(dict(leaves(dataset[index])))
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
    first, again, other = draws
    if not same(first, again):
        return "stateful"
    return "" if same(first, other) else "global"


def data_worker_seeding(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    real = ctx.samples.loader
    problem = why_not_indexable(real)
    if problem and isinstance(real, DataLoader) and isinstance(real.dataset, IterableDataset):
        return _stream_seeding(real, evidence)
    if problem:
        return skips(
            f"{problem}: no index to draw repeatedly and no dataset to stream from several "
            "workers; return a torch DataLoader from train_dataloader"
        )
    workers = real.num_workers
    index = next(iter(real.batch_sampler))[0]  # the first sample the loader draws
    use = global_rng_use(real.dataset, index)
    evidence |= {"num_workers": workers, "sample_index": int(index), "rng_use": use or "none"}
    if workers >= 2:
        # Sample `index` loaded twice by each worker, set up as the run's loader sets them up.
        repeated = Subset(real.dataset, [index] * (2 * workers))
        with quiet():
            first, second, *_ = [dict(leaves(b)) for b in _like(real, repeated, 2, workers)]
        within = any(
            t.dim() > 0 and len(t) == 2 and not torch.equal(t[0], t[1]) for t in first.values()
        )
        across = same(first, second)
        evidence |= {"random_within_worker": within, "identical_across_workers": across}
        if within and across:
            return fails(
                f"all {workers} dataloader workers draw the same random augmentation (they share "
                "one copied RNG state, e.g. numpy's); seed each worker in worker_init_fn from "
                "torch.initial_seed(), or use torch's RNG for augmentation"
            )
    if use:
        source = "an RNG whose state moves with every draw"
        if use == "global":
            source = "the global RNG (torch.rand / random / np.random)"
        return warns(
            f"{type(real.dataset).__name__}.__getitem__ draws its randomness from {source}: a "
            f"sample's augmentation then depends on num_workers (now {workers}) and on which "
            "worker loads it, and a mid-epoch resume (which skips consumed batches without "
            "loading them) is not exact; draw it from a torch.Generator seeded by (seed, epoch, "
            "index), e.g. wrap the dataset and its transform in "
            "trainwell.loading.per_sample.PerSampleRandom"
        )
    if workers < 2:
        return passes(
            f"each sample is a function of its index (data.num_workers={workers}): no worker "
            "random state to repeat, nothing that changes with the number of workers"
        )
    if not within:
        return passes(
            "a sample is the same every time it is loaded (no random augmentation, or one that "
            "is a function of the sample), so worker seeds cannot repeat it"
        )
    return passes(f"{workers} workers draw different augmentations")


def _stream_seeding(real: DataLoader, evidence: dict[str, Any]) -> Verdict:
    """Each worker runs its own copy of an iterable dataset's __iter__: a pass through the run's
    workers must repeat no more samples than one process does."""
    workers = evidence["num_workers"] = real.num_workers
    if workers < 2:
        return passes(f"the stream is read by {workers} worker(s): none repeats another")
    repeated, compared = {}, {}
    for n in (0, workers):
        with quiet():
            stream = content(_like(real, real.dataset, real.batch_size, n), STREAM_COMPARED)
        repeated[n], compared[n] = round(1 - len(set(stream)) / max(1, len(stream)), 4), len(stream)
    evidence |= {"samples": compared, "repeated_share": repeated}
    alone, shared = repeated[0], repeated[workers]
    if shared - alone >= REPEATED:
        return fails(
            f"read by {workers} dataloader workers, the stream repeats {shared:.0%} of its first "
            f"{compared[workers]} samples ({alone:.0%} in one process): every worker runs the "
            "same __iter__ and yields the same samples (or draws them from a generator seeded "
            "before the workers started); shard the stream by "
            "torch.utils.data.get_worker_info() and seed its randomness per worker"
        )
    return passes(f"{workers} workers stream different samples (no more repeats than one process)")


def _like(real: DataLoader, dataset: Any, batch_size: int | None, workers: int) -> DataLoader:
    """A probe loader over `dataset` whose `workers` are set up as the run's: its collate_fn,
    generator, worker_init_fn (or Lightning's under seed_everything(workers=True)), start method."""
    init = real.worker_init_fn if workers else None
    if init is None and workers and os.environ.get("PL_SEED_WORKERS") == "1":
        init = functools.partial(pl_worker_init_function, rank=0)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=real.collate_fn,
        worker_init_fn=init,
        generator=real.generator,
        multiprocessing_context=real.multiprocessing_context if workers else None,
    )
