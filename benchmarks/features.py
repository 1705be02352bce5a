"""What a feature costs, on against off (and what starting costs): one runner, one part per
feature, each on the harness.

    .venv/bin/python benchmarks/features.py FEATURE [options]     # FEATURE -h: its options

    startup    P5: make train split into start-up and training; a mistake answered, how fast
    guards     the training guards on vs off: train() wall time, time inside their hooks
    ema        EMA (ema.decay): host time per optimizer step, off / the template's / Lightning's
    cv         cross-validation's fixed cost per fold: cv.folds=K vs the same K fold runs
    summary    a multirun's summary cost per job end (and trials packed vs one at a time)
    resume     mid-epoch resume: process start -> first resumed step, at 5% vs 95% of an epoch
    state      numpy state vs lists; the step-0 checkpoint check's share of a run (and on a
               large model)
    doctor     `make doctor` wall time: a baseline commit vs this checkout
    imbalance  plain training vs the two class-imbalance compensations: balanced accuracy
    memory     P3/P4: gradient checkpointing and accumulation: peak memory, step time
    data_pipeline   P6: the CIFAR-10 loader from disk: num_workers / pin / persistent sweep

Every feature composes the config `scripts/train.py` composes (harness.compose) or runs
`scripts/train.py` itself, runs its sides interleaved (harness.interleaved) and ends with one
`key=value` line (harness.final_line): the figures docs/benchmarks.md quotes, each feature's
keys as documented in its section (and in the docstring of its `run_<feature>` below).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import json
import os
import pickle
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from operator import methodcaller
from pathlib import Path
from typing import Any, ClassVar

import harness
import lightning as L
import numpy as np
import torch
from harness import REPO, child_env, compose, describe, figure, interleaved, summary
from torch import nn

from trainwell.compat import set_sampler_epoch

Figures = dict[str, float | int | str]
# A run's extras every feature turns off: the config print and the progress widgets.
QUIET = [
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
]


def script(
    name: str, args: list[str], threads: int, src: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`scripts/<name>` run as a user runs it (benchmarks/ importable: Hydra builds this module's
    callbacks by name), `src` first on the path when given (a baseline's trainwell)."""
    env = harness.child_env(threads)
    if src is not None:
        env["PYTHONPATH"] = f"{src}{os.pathsep}{env['PYTHONPATH']}"
    cmd = [sys.executable, str(REPO / "scripts" / name), *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)


def export_tree(ref: str, into: Path, *paths: str) -> Path:
    """`ref`'s `paths` unpacked from git into `into` (no checkout of the working tree)."""
    archive = subprocess.run(
        ["git", "archive", ref, *paths], cwd=REPO, check=True, capture_output=True
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


# --- guards ------------------------------------------------------------------------------------

GUARDS = ("non_finite_guard", "grad_norm_monitor", "train_mode_guard")
GUARD_CLASSES = ("NonFiniteGuard", "GradNormLogger", "TrainModeGuard")


def guard_run(guards: bool, epochs: int, out: Path, profile: bool = False) -> float:
    """Wall seconds of one train() call (test=false) writing into `out`."""
    from trainwell.training.run import train

    overrides = [*harness.default_run(), f"trainer.max_epochs={epochs}", "test=false"]
    overrides += ["print_config=false"]
    overrides += [] if guards else [f"callbacks.{g}=null" for g in GUARDS]
    if profile:
        overrides.append(
            "+trainer.profiler={_target_: lightning.pytorch.profilers.SimpleProfiler, "
            f"dirpath: {out}, filename: profile}}"
        )
    wall, _, _ = harness.timed(lambda: train(compose(overrides, out)))
    return wall


def hook_share(report: Path) -> float:
    """Time inside guard hooks / total profiled time, from SimpleProfiler's report table."""
    total, guards = 0.0, 0.0
    for line in report.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4:
            continue
        if cells[0] == "Total":
            total = float(cells[3])
        elif cells[0].startswith("[Callback]") and any(n in cells[0] for n in GUARD_CLASSES):
            guards += float(cells[3])
    return guards / total if total else float("nan")


def guards_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)


def run_guards(args: argparse.Namespace) -> Figures:
    """Wall-time overhead of the training guards (trainwell.callbacks) on the default experiment.

    Each repetition runs `trainwell.training.run.train` twice, guards on and off (the order
    alternates between repetitions), with everything else identical: same config, seed and
    data. "Off" removes the three guard callbacks (`callbacks.<guard>=null`). Timed: the whole
    train() call with test=false. On a shared machine the wall difference is noisy, so a second
    figure is measured directly: one more guarded run under Lightning's SimpleProfiler, summing
    the time inside the guards' hooks as a share of the fit (`guard_hook_share`).

    Last line: `guard_overhead=<median(on)/median(off) - 1> guard_hook_share=<fraction>
    guards_on_s=.. guards_off_s=..`."""
    with tempfile.TemporaryDirectory(prefix="tw-bench-guards-") as tmp:

        def side(guards: bool) -> float:
            return guard_run(guards, args.epochs, Path(tempfile.mkdtemp(dir=tmp)))

        def report(rep: int, results: dict[str, float]) -> None:
            line = ", ".join(f"guards {k}: {v:.2f} s" for k, v in results.items())
            print(f"rep {rep}: {line}", flush=True)

        times = interleaved(
            {"on": lambda: side(True), "off": lambda: side(False)}, args.reps, report
        )
        guard_run(True, args.epochs, Path(tmp) / "profiled", profile=True)
        share = hook_share(Path(tmp) / "profiled" / "fit-profile.txt")
    figures: Figures = {}
    on = figure(figures, "guards_on_s", times["on"], "train() with guards", " s")
    off = figure(figures, "guards_off_s", times["off"], "train() without guards", " s")
    print(f"time inside the guards' hooks (SimpleProfiler): {100 * share:.2f}% of the fit")
    return {"guard_overhead": on / off - 1, "guard_hook_share": share, **figures}


# --- ema ---------------------------------------------------------------------------------------

DECAY = 0.999
EMA_SIDES: dict[str, list[str]] = {
    "off": [],
    "ema": [f"ema.decay={DECAY}"],
    "lightning": [
        "+callbacks.stock_ema._target_=lightning.pytorch.callbacks.EMAWeightAveraging",
        f"+callbacks.stock_ema.decay={DECAY}",
    ],
}


class HookClock:
    """Process CPU seconds inside the averaging callbacks' per-batch hook (the update), summed
    over a fit: patched onto the template's ExactEMA and Lightning's WeightAveraging for the
    benchmark's lifetime."""

    seconds = 0.0

    @classmethod
    def install(cls) -> None:
        from lightning.pytorch.callbacks import WeightAveraging

        from trainwell.callbacks.ema import ExactEMA

        for owner in (ExactEMA, WeightAveraging):
            cls._time(owner)

    @classmethod
    def _time(cls, owner: type) -> None:
        hook = owner.on_train_batch_end

        def timed(self: Any, *args: Any, **kwargs: Any) -> None:
            start = time.process_time()
            try:
                hook(self, *args, **kwargs)
            finally:
                cls.seconds += time.process_time() - start

        owner.on_train_batch_end = timed  # type: ignore[attr-defined]


class BatchCPUClock(L.Callback):
    """Process CPU seconds of every training batch, from its start to its end (forward,
    backward, optimizer step and the averaging update, which runs before this hook; not the
    data loading, validation or checkpoint writes): the host's time per step, which neighbours
    on a shared machine stretch far less than wall time. Built by Hydra inside train()."""

    last: ClassVar[list[float]] = []

    def __init__(self) -> None:
        self.batches: list[float] = []
        self._start = 0.0
        BatchCPUClock.last = self.batches

    def on_train_batch_start(self, *args: Any) -> None:
        self._start = time.process_time()

    def on_train_batch_end(self, *args: Any) -> None:
        self.batches.append(time.process_time() - self._start)


def ema_step_seconds(side: str, epochs: int, extra: list[str], out: Path) -> tuple[float, float]:
    """(host CPU seconds per optimizer step, of them in the averaging hook) of one train() call,
    the first epoch left out (warm-up)."""
    # The class Hydra builds (module `features`), which is not `__main__`'s when run as a script.
    from features import BatchCPUClock as Built

    from trainwell.training.run import train

    HookClock.seconds = 0.0
    overrides = [
        *harness.default_run(),
        *extra,
        *EMA_SIDES[side],
        f"trainer.max_epochs={epochs}",
        "test=false",
        "print_config=false",
        "callbacks.early_stopping=null",
        "callbacks.rich_progress_bar=null",
        "+callbacks.step_clock._target_=features.BatchCPUClock",
    ]
    results = train(compose(overrides, out))
    steps = int(results["finished_at"]["global_step"])
    batches = Built.last
    later = batches[len(batches) // epochs :] if epochs > 1 else batches
    per_step = sum(later) / max(1, round(steps * len(later) / len(batches)))
    return per_step, HookClock.seconds / max(steps, 1)


def ema_update_seconds(extra: list[str], reps: int) -> dict[str, Any]:
    """Seconds per update of the run's module: the template's average and AveragedModel with
    Lightning's per-tensor EMA function, alternating."""
    import torch
    from hydra.utils import instantiate
    from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn

    from trainwell.compat.averaging import PlacedAverage

    with tempfile.TemporaryDirectory() as tmp:
        module = instantiate(compose([*harness.default_run(), *extra], Path(tmp)).model)
    placed = PlacedAverage(module)
    stock = AveragedModel(module, avg_fn=get_ema_avg_fn(DECAY), use_buffers=True)
    updates = {
        "ema": lambda: placed.update(module, DECAY),
        "lightning": lambda: stock.update_parameters(module),
    }
    times: dict[str, list[float]] = {"ema": [], "lightning": []}
    with torch.no_grad():
        for _ in range(reps):
            for name, update in updates.items():
                start = time.perf_counter()
                for _ in range(10):
                    update()
                times[name].append((time.perf_counter() - start) / 10)
    tensors = len(list(module.parameters())) + len(list(module.buffers()))
    return {name: statistics.median(values) for name, values in times.items()} | {
        "tensors": tensors
    }


def ema_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--override", action="append", default=[], help="a train.py override")


def run_ema(args: argparse.Namespace) -> Figures:
    """What EMA (`ema.decay`) costs per optimizer step, against the same run without it.

    Three sides of `trainwell.training.run.train`, interleaved, identical but for the average:
    `off` (ema.decay=null), `ema` (ema.decay=0.999: the template's ExactEMA) and `lightning`
    (Lightning's own EMAWeightAveraging(decay=0.999) added as a callback: the same work, done by
    the stock callback). Figures: the host time per optimizer step (process CPU time from each
    training batch's start to its end, epochs after the first: forward, backward, optimizer step
    and the update; CPU time because neighbours on a shared machine stretch wall time far more)
    of each side, as ratios to `off`; and the time inside the averaging callback's per-batch hook
    (the update) per optimizer step, as a share of `off`'s step. A second figure isolates the
    update itself: one update of the run's module by the template's average (one fused foreach
    lerp, the count on the host) and by torch's AveragedModel with the per-tensor EMA function
    Lightning's callback passes it, each timed over many repetitions on the same module.

    Last line: `ema_step_ratio=.. lightning_step_ratio=.. ema_hook_share=..
    lightning_hook_share=.. ema_update_ms=.. lightning_update_ms=.. tensors=.. off_step_ms=..`
    (and each side's figures)."""
    HookClock.install()
    with tempfile.TemporaryDirectory(prefix="tw-bench-ema-") as tmp:

        def side(name: str) -> tuple[float, float]:
            out = Path(tempfile.mkdtemp(dir=tmp))
            return ema_step_seconds(name, args.epochs, args.override, out)

        def report(rep: int, results: dict[str, tuple[float, float]]) -> None:
            line = ", ".join(
                f"{k}: {1e3 * v[0]:.3f} ms/step ({1e3 * v[1]:.3f} in the update hook)"
                for k, v in results.items()
            )
            print(f"rep {rep}: {line}", flush=True)

        runs = interleaved({k: (lambda k=k: side(k)) for k in EMA_SIDES}, args.reps, report)
    update = ema_update_seconds(args.override, reps=max(5, 5 * args.reps))
    figures: Figures = {}
    times = {k: [step for step, _ in v] for k, v in runs.items()}
    hooks = {k: [hook for _, hook in v] for k, v in runs.items()}
    medians = {k: summary(v)["median"] for k, v in times.items()}
    for name in EMA_SIDES:
        ms = [1e3 * t for t in times[name]]
        figure(figures, f"{name}_step_ms", ms, f"{name}: per step", " ms", spread=True)
    for name in ("ema", "lightning"):
        ms = [1e3 * t for t in hooks[name]]
        figure(figures, f"{name}_hook_ms", ms, f"{name}: hook per step", " ms")
    print(
        f"one update of {update['tensors']} tensors: template {1e3 * update['ema']:.3f} ms, "
        f"Lightning's {1e3 * update['lightning']:.3f} ms"
    )
    off_step = float(figures["off_step_ms"])
    return {
        "ema_step_ratio": medians["ema"] / medians["off"],
        "lightning_step_ratio": medians["lightning"] / medians["off"],
        "ema_hook_share": float(figures["ema_hook_ms"]) / off_step,
        "lightning_hook_share": float(figures["lightning_hook_ms"]) / off_step,
        "ema_update_ms": 1e3 * update["ema"],
        "lightning_update_ms": 1e3 * update["lightning"],
        "tensors": update["tensors"],
        **figures,
    }


# --- cv ----------------------------------------------------------------------------------------


def cv_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3)


def run_cv(args: argparse.Namespace) -> Figures:
    """Cross-validation's fixed cost per fold: `cv.folds=K` vs the same K fold runs by hand.

    Both sides train the same K folds (the same indices, config and seed) through
    `training.run.train`; the CV side adds what cross-validation does beyond K runs: the fold
    assignment and folds.json, the leak probe (three datamodule setups), each fold's out-of-fold
    predictions and the assembly of oof_predictions.csv and results.json. Fixed cost per fold =
    (CV wall time - K fold runs' wall time) / K.

    Last line: `folds=K cv_s=.. runs_s=.. ratio=.. overhead_per_fold_s=.. probe_s=..
    oof_per_fold_s=..` (the last two: the fixed cost's parts timed alone)."""
    from trainwell.cli import run_training
    from trainwell.training.cv.data_hook import refuse_leaks
    from trainwell.training.cv.oof import write_fold_predictions
    from trainwell.training.cv.run import fold_config, plan_folds
    from trainwell.training.run import train

    overrides = [
        *harness.default_run(),
        f"cv.folds={args.folds}",
        f"trainer.max_epochs={args.epochs}",
        *QUIET,
        "logger=[]",
        "trainer.num_sanity_val_steps=0",
    ]
    root = Path(tempfile.mkdtemp(prefix="cv_overhead-"))

    def fresh(name: str) -> Path:
        path = root / name
        shutil.rmtree(path, ignore_errors=True)
        return path

    def cv() -> float:
        run_dir = fresh("cv")
        start = time.perf_counter()
        run_training(compose(overrides, run_dir))
        return time.perf_counter() - start

    def runs() -> float:
        run_dir = fresh("runs")
        cfg = compose(overrides, run_dir)
        folds = plan_folds(cfg)  # outside the timing: the CV side pays for it
        start = time.perf_counter()
        for k in range(args.folds):
            on_fold = methodcaller("set_cv_fold", folds.train_of(k), folds.val_of(k))
            train(fold_config(cfg, run_dir, k), prepare_data=on_fold)
        return time.perf_counter() - start

    def parts() -> tuple[float, float]:
        """(fold assignment + leak probe, one fold's out-of-fold predictions) in seconds, timed
        alone on the finished CV run: the named parts of the fixed cost."""
        run_dir = root / "cv"
        cfg = compose(overrides, run_dir)
        start = time.perf_counter()
        folds = plan_folds(cfg)
        refuse_leaks(cfg.data, folds.train_of(0), folds.val_of(0))
        planned = time.perf_counter() - start
        fold_cfg = fold_config(cfg, run_dir, 0)
        best = str(run_dir / "fold_0" / "checkpoints" / "best.ckpt")
        start = time.perf_counter()
        write_fold_predictions(fold_cfg, folds, 0, best)
        return planned, time.perf_counter() - start

    try:
        cv(), runs()  # warm-up: imports, first-call costs
        times = interleaved({"cv": cv, "runs": runs}, args.reps)
        named = [parts() for _ in range(args.reps)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    c, r = summary(times["cv"]), summary(times["runs"])
    per_fold = [(a - b) / args.folds for a, b in zip(times["cv"], times["runs"], strict=True)]
    o = summary(per_fold)
    print(f"cv.folds={args.folds}:      {c['median']:.2f} s (spread {c['spread']:.1%})")
    print(f"{args.folds} fold runs:      {r['median']:.2f} s (spread {r['spread']:.1%})")
    print(f"fixed cost per fold: {o['median']:.3f} s (min {o['min']:.3f}, max {o['max']:.3f})")
    plan_s = summary([p for p, _ in named])["median"]
    predict_s = summary([q for _, q in named])["median"]
    print(f"  of which, once per run: folds + leak probe {plan_s:.3f} s")
    print(f"  of which, per fold: out-of-fold predictions {predict_s:.3f} s")
    return {
        "folds": args.folds,
        "cv_s": c["median"],
        "runs_s": r["median"],
        "ratio": c["median"] / r["median"],
        "overhead_per_fold_s": o["median"],
        "probe_s": plan_s,
        "oof_per_fold_s": predict_s,
    }


# --- summary -----------------------------------------------------------------------------------

TINY = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "print_config=false",
    "logger=[]",
]


def real_job(root: Path, threads: int) -> Path:
    """A one-job sweep through scripts/train.py: the files every job of a sweep leaves."""
    sweep = root / "real"
    args = ["-m", "seed=1", *harness.default_run(), *TINY, f"hydra.sweep.dir={sweep}"]
    proc = script("train.py", args, threads)
    if proc.returncode != 0:
        raise SystemExit(f"the real sweep job failed:\n{proc.stderr[-3000:]}")
    return sweep


def play_back(real: Path, out: Path, n: int, seed: int) -> list[float]:
    """A sweep of `n` jobs ending one after the other; the seconds each job's end spent on the
    summary (the callback's on_job_end)."""
    import yaml
    from hydra.core.utils import JobReturn, JobStatus
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from trainwell.summary.callback import SweepSummary
    from trainwell.summary.jobs import expected_jobs

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    lrs = ("0.001", "0.003")
    seeds = [str(s) for s in range(1, n // len(lrs) + 1)]
    multirun = yaml.safe_load((real / "multirun.yaml").read_text())
    multirun["hydra"]["overrides"]["task"] = [f"seed={','.join(seeds)}",
                                              f"model.optimizer.lr={','.join(lrs)}", *TINY]  # fmt: skip
    (out / "multirun.yaml").write_text(yaml.safe_dump(multirun))
    results = json.loads((real / "0" / "results.json").read_text())
    rng = random.Random(seed)
    callback, costs = SweepSummary(), []
    # Each job's overrides as Hydra's basic sweeper writes them (`print_config=False`).
    for number, expected in enumerate(expected_jobs(multirun) or []):
        job = out / str(number)
        shutil.copytree(real / "0" / ".hydra", job / ".hydra")
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(expected.overrides))
        metrics = {k: v * (1 + 0.01 * rng.random()) for k, v in results["metrics"].items()}
        (job / "results.json").write_text(json.dumps({**results, "metrics": metrics}, indent=2))
        config = OmegaConf.create(
            {"hydra": {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(out)},
                       "runtime": {"output_dir": str(job)}}}
        )  # fmt: skip
        ended = JobReturn(status=JobStatus.COMPLETED)
        ended.return_value = metrics.get("val/acc", 0.0)
        start = time.perf_counter()
        callback.on_job_end(config=config, job_return=ended)
        costs.append(time.perf_counter() - start)
    done = json.loads((out / "summary.json").read_text())
    assert done["jobs"] == {"done": n, "failed": 0, "missing": 0}, done["jobs"]
    assert (out / "summary.png").is_file()
    return costs


def sweep(out: Path, threads: int, trials: int, *launcher: str) -> tuple[float, list[dict]]:
    """(wall seconds, each trial's results.json metrics) of `train.py -m seed=1..trials`."""
    seeds = ",".join(str(s) for s in range(1, trials + 1))
    args = ["-m", *launcher, f"seed={seeds}", *harness.default_run(), "print_config=false",
            f"hydra.sweep.dir={out}"]  # fmt: skip
    wall, _, proc = harness.timed(lambda: script("train.py", args, threads))
    if proc.returncode != 0:
        raise SystemExit(f"the sweep {' '.join(launcher) or 'one at a time'} failed:\n"
                         f"{proc.stderr[-3000:]}")  # fmt: skip
    metrics = [json.loads((out / str(k) / "results.json").read_text())["metrics"]
               for k in range(trials)]  # fmt: skip
    return wall, metrics


def packed(root: Path, trials: int) -> Figures:
    """One-at-a-time against two at a time (launcher=local), at the packed trials' threads."""
    threads = max(len(os.sched_getaffinity(0)) // 2, 1)
    alone_s, alone = sweep(root / "alone", threads, trials)
    packed_s, side_by_side = sweep(
        root / "packed", threads, trials, "launcher=local", "hydra.launcher.slots=2"
    )
    equal = int(alone == side_by_side)
    print(f"{trials} trials at {threads} threads each: one at a time {alone_s:.1f} s, "
          f"2 at once {packed_s:.1f} s (ratio {packed_s / alone_s:.2f}); metrics equal trial "
          f"by trial: {bool(equal)}", flush=True)  # fmt: skip
    return {
        "packed_trials": trials,
        "alone_s": round(alone_s, 1),
        "packed_s": round(packed_s, 1),
        "packed_ratio": round(packed_s / alone_s, 3),
        "packed_equal": equal,
    }


def summary_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="6,60", help="sweep sizes (even numbers of jobs)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--packed", type=int, default=0, help="also N default trials, packed vs one at a time"
    )


def run_summary(args: argparse.Namespace) -> Figures:
    """What a multirun costs: the time each job's end spends on summary.json/.md/.png, and (with
    `--packed`) the wall time of trials packed side by side (launcher=local) against one at a time.

    A real sweep job is trained once (`train.py -m seed=1`, a few batches) for real files: its
    results.json, .hydra/ and the sweep's multirun.yaml. From them, sweeps of N jobs
    (`seed=1..N/2 model.optimizer.lr=0.001,0.003`) are played back job by job: before job k's
    end the dir holds jobs 0..k-1 with results, job k's dir about to get them and no dir yet for
    the rest, exactly as under the basic launcher; then the Hydra callback's `on_job_end` runs
    as Hydra calls it (it rebuilds the summary from every job's files, and at the last job draws
    the plot). Each job's results differ (a seeded perturbation), so every update does the full
    work. Per sweep size: the mean over the sweep's job ends (the cost each job adds, the plot
    included), and the slowest job end. Target: at most 0.2 s per job.

    `--packed N`: N trials of the default experiment (`seed=1..N`) as one sweep run one at a
    time (the basic launcher) and as one sweep with `launcher=local hydra.launcher.slots=2`,
    every trial at the same CPU threads (cores / 2, what the packed slots get). Figures: both
    wall times, their ratio, and whether every trial's results.json metrics are equal in both
    sweeps (they must be: `packed_equal=1`).

    Last line: `per_job_s_6=.. max_s_6=.. per_job_s_60=.. max_s_60=..`."""
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(tempfile.mkdtemp(prefix="summary_cost-"))
    try:
        real = real_job(root, args.threads)
        # Imports and matplotlib's font cache, once: a train.py process has them already
        # (Lightning imports matplotlib) when its first job ends.
        play_back(real, root / "warmup", 2, seed=0)
        sides = {
            str(n): (lambda n=n: play_back(real, root / f"sweep{n}", n, seed=n)) for n in sizes
        }
        runs = interleaved(sides, args.reps)
        figures: Figures = {}
        for n in sizes:
            means = [sum(costs) / len(costs) for costs in runs[str(n)]]
            figure(figures, f"per_job_s_{n}", means, f"{n} jobs: summary per job end", " s")
            figure(
                figures, f"max_s_{n}", [max(c) for c in runs[str(n)]],
                f"{n} jobs: slowest job end (the last: the plot)", " s",
            )  # fmt: skip
        if args.packed:
            figures |= packed(root, args.packed)
        return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- resume ------------------------------------------------------------------------------------

MARK = "bench-resume"


class FirstResumedStep(L.Callback):
    """Print the wall clock when the first training batch of this process starts, then end it:
    everything after that point is the same at any position."""

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        print(f"{MARK} first_step {time.time():.6f} batch {trainer.global_step}", flush=True)
        os._exit(0)


class KillAfterStep(L.Callback):
    """SIGKILL this process once the step checkpoint of optimizer step `step` is in `ckpt_dir`."""

    def __init__(self, step: int, ckpt_dir: str) -> None:
        self.step, self.ckpt_dir = step, Path(ckpt_dir)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        # The next batch's start: the step checkpoint was handed to its (background) writer
        # at the end of the previous batch; it appears by an atomic rename when complete.
        if trainer.global_step != self.step:
            return
        deadline = time.monotonic() + 120
        while not (self.ckpt_dir / f"step-{self.step:07d}.ckpt").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no step checkpoint of step {self.step} in {self.ckpt_dir}")
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)


# The resumed run: an MLP on CIFAR-shaped synthetic data (`--samples` of them) with the host-side
# crop + flip; in a clone without them, the engine's own digits (their 1,258 training samples).
RESUMED = harness.Workload(
    "the MLP on synthetic data",
    ("model=mlp", "data=synthetic", "data.augment=true"),
    (*harness.CLASSIFIER, *harness.SYNTHETIC),
    owned=harness.OWNED,
)


def resume_overrides(samples: int, batch: int) -> list[str]:
    chosen = harness.resolve(RESUMED)
    assert chosen is not None  # RESUMED has an owned stand-in
    sized = [f"data.num_samples={samples}", "data.num_val=64", "data.num_test=64"]
    return [
        *chosen,
        *([] if harness.is_owned(RESUMED) else sized),
        f"data.batch_size={batch}",
        "data.num_workers=0",
        "trainer.max_epochs=1",
        "trainer.num_sanity_val_steps=0",
        "callbacks.early_stopping=null",
        *QUIET,
        "test=false",
    ]


def resumed_epoch_batches(args: argparse.Namespace) -> int:
    """Training batches in the resumed run's epoch: `--samples` / `--batch`, or on the owned
    stand-in, its own training split's."""
    if not harness.is_owned(RESUMED):
        return -(-args.samples // args.batch)
    from hydra.utils import instantiate

    with tempfile.TemporaryDirectory() as tmp:
        datamodule = instantiate(
            compose(resume_overrides(args.samples, args.batch), Path(tmp)).data
        )
    datamodule.setup("fit")
    return len(datamodule.train_dataloader())


def killed_run(run_dir: Path, step: int, args: argparse.Namespace) -> None:
    proc = script("train.py", [
        *resume_overrides(args.samples, args.batch),
        f"callbacks.step_checkpoint.every_n_train_steps={step}",
        "+callbacks.bench_kill._target_=features.KillAfterStep",
        f"+callbacks.bench_kill.step={step}", f"+callbacks.bench_kill.ckpt_dir={run_dir}/checkpoints",
        f"hydra.run.dir={run_dir}",
    ], args.threads)  # fmt: skip
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the run to resume did not die at step {step}:\n{proc.stderr[-3000:]}")


def time_resume(source: Path, scratch: Path, args: argparse.Namespace) -> tuple[float, int]:
    """(seconds from process start to the first resumed step, the step it resumed at)."""
    run_dir = scratch / f"resume-{time.monotonic_ns()}"
    shutil.copytree(source, run_dir)
    start = time.time()
    proc = script("train.py", [
        *resume_overrides(args.samples, args.batch), "resume=auto",
        "+callbacks.bench_first._target_=features.FirstResumedStep", f"hydra.run.dir={run_dir}",
    ], args.threads)  # fmt: skip
    marks = [line.split() for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not marks:
        raise RuntimeError(f"resume failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    shutil.rmtree(run_dir)
    return float(marks[0][2]) - start, int(marks[0][4])


def loader_first_batch(step: int, args: argparse.Namespace, scratch: Path) -> float:
    """Seconds from `iter()` to the first batch of the train loader `train.py` builds, restored to
    batch `step` of epoch 0: the loader's own share of a resume, without the process noise."""
    from hydra.utils import instantiate

    from trainwell import compat
    from trainwell.loading.sharding import install_loader_policy

    cfg = compose(resume_overrides(args.samples, args.batch), scratch / "in-process")
    datamodule = instantiate(cfg.data)
    install_loader_policy(datamodule, seed=int(cfg.seed))
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()
    compat.set_sampler_epoch(loader, 0)
    loader.load_state_dict({"epoch": 0, "batches": step, "epoch_batches": len(loader)})
    start = time.perf_counter()
    next(iter(loader))
    return time.perf_counter() - start


def resume_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=20_000, help="train samples (one epoch)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=5)


def run_resume(args: argparse.Namespace) -> Figures:
    """Mid-epoch resume: time from process start to the first resumed training step, at 5% and at
    95% of an epoch. A resume that loads (and discards) the consumed batches grows with the
    position; one that starts the sampler at the saved position costs the same anywhere.

    Setup, once per position: the real `scripts/train.py` (CIFAR-shaped synthetic data with the
    host-side crop + flip, an MLP, no workers) is SIGKILLed right after the step checkpoint
    written at that position. Then, interleaved, each rep copies one of the two killed run dirs
    and runs `train.py resume=auto` into the copy with a callback that prints the wall clock at
    the first resumed training step and ends the process there. Then, in this process, the
    loader alone: the train loader `train.py` builds, restored to each position, timed from
    `iter()` to its first batch (what a resume adds at that position, without the process
    start-up's noise).

    Last line: `resume_5pct_s=.. resume_95pct_s=.. ratio_95_to_5=.. loader_5pct_ms=..
    loader_95pct_ms=.. batches_5pct=.. batches_95pct=.. epoch_batches=..` (medians over the
    reps; ratio ~1.0 within the spread means constant time)."""
    epoch_batches = resumed_epoch_batches(args)
    if harness.is_owned(RESUMED):
        print(f"--samples {args.samples} does not apply: the stand-in trains on its own split")
    steps = {"5pct": max(1, round(0.05 * epoch_batches)), "95pct": round(0.95 * epoch_batches)}
    with tempfile.TemporaryDirectory(prefix="resume-position-") as tmp:
        scratch = Path(tmp)
        sources = {}
        for name, step in steps.items():
            sources[name] = scratch / f"killed-{name}"
            killed_run(sources[name], step, args)
            print(f"# killed a run after step {step} of {epoch_batches} ({name})", flush=True)

        def report(rep: int, results: dict[str, Any]) -> None:
            line = ", ".join(f"{k} {v[0]:.3f} s (step {v[1]})" for k, v in results.items())
            print(f"rep {rep}: {line}", flush=True)

        runs = interleaved(
            {name: (lambda s=src: time_resume(s, scratch, args)) for name, src in sources.items()},
            args.reps,
            report,
        )
        in_process = interleaved(
            {
                name: (lambda k=step: loader_first_batch(k, args, scratch))
                for name, step in steps.items()
            },
            max(args.reps, 5),
        )
    figures: Figures = {}
    for name, values in in_process.items():
        label = f"loader iter() -> first batch at {name}"
        figure(figures, f"loader_{name}_ms", [1000 * v for v in values], label, " ms")
    for name, values in runs.items():
        label = f"start -> first resumed step at {name}"
        figure(figures, f"resume_{name}_s", [s for s, _ in values], label, " s")
    return {
        "resume_5pct_s": figures["resume_5pct_s"],
        "resume_95pct_s": figures["resume_95pct_s"],
        "ratio_95_to_5": float(figures["resume_95pct_s"]) / float(figures["resume_5pct_s"]),
        "loader_5pct_ms": figures["loader_5pct_ms"],
        "loader_95pct_ms": figures["loader_95pct_ms"],
        "batches_5pct": runs["5pct"][0][1],
        "batches_95pct": runs["95pct"][0][1],
        "epoch_batches": epoch_batches,
    }


# --- state -------------------------------------------------------------------------------------


@functools.cache
def _stats_datamodules() -> dict[str, type]:
    """Digits datamodules that also fit a mean and std per pixel on the training split (the same
    work on both sides), keeping them as Python lists and floats or as numpy arrays and scalars
    (as people keep them). Built on first use: only the state feature needs the digits example."""
    import numpy as np

    from project.data.digits import DigitsDataModule

    class PixelStats(DigitsDataModule):
        def setup(self, stage: str | None = None) -> None:
            super().setup(stage)
            if not hasattr(self, "pixel_mean"):
                images, _ = self._load()
                train = images[self.split_indices["train"]].reshape(-1, 64)
                self.pixel_mean, self.pixel_std = train.mean(axis=0), train.std(axis=0)
                self.count = np.int64(len(train))

        def kept(self, value: Any) -> Any:
            raise NotImplementedError

        def state_dict(self) -> dict[str, Any]:
            state = super().state_dict()
            if not state:
                return {}
            return {
                "mean": self.kept(np.float64(state["mean"])),
                "std": self.kept(np.float64(state["std"])),
                "pixel_mean": self.kept(self.pixel_mean),
                "pixel_std": self.kept(self.pixel_std),
                "count": self.kept(self.count),
            }

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            super().load_state_dict(state_dict)
            self.pixel_mean = np.asarray(state_dict["pixel_mean"], dtype=np.float32)
            self.pixel_std = np.asarray(state_dict["pixel_std"], dtype=np.float32)
            self.count = np.int64(state_dict["count"])

    class ListStatsDigits(PixelStats):
        def kept(self, value: Any) -> Any:
            return np.asarray(value).tolist()

    class NumpyStatsDigits(PixelStats):
        def kept(self, value: Any) -> Any:
            return value

    for cls in (ListStatsDigits, NumpyStatsDigits):
        cls.__module__, cls.__qualname__ = "features", cls.__name__
    return {cls.__name__: cls for cls in (ListStatsDigits, NumpyStatsDigits)}


def __getattr__(name: str) -> Any:
    """`features.ListStatsDigits` / `features.NumpyStatsDigits`, as Hydra locates them."""
    if name in ("ListStatsDigits", "NumpyStatsDigits"):
        return _stats_datamodules()[name]
    raise AttributeError(f"module 'features' has no attribute {name!r}")


def state_runs(args: argparse.Namespace) -> dict[str, float]:
    """The four digits runs (see run_state), interleaved; their figures."""
    from trainwell.callbacks import checkpoint_rehearsal
    from trainwell.io.checkpoint_write import Rehearsal
    from trainwell.training.run import train

    overrides = list(QUIET)
    if args.epochs is not None:
        overrides.append(f"trainer.max_epochs={args.epochs}")
    root = Path(tempfile.mkdtemp(prefix="state_checkpoint-"))
    real = checkpoint_rehearsal.rehearse
    spent: list[tuple[float, float]] = []  # (wall, CPU) seconds in the step-0 check

    def timed_rehearse(trainer: Any, datamodule: Any = None, payloads: bool = True) -> Rehearsal:
        wall, cpu = time.perf_counter(), time.process_time()
        outcome = real(trainer, datamodule, payloads)
        spent.append((time.perf_counter() - wall, time.process_time() - cpu))
        return outcome

    def skipped(trainer: Any, datamodule: Any = None, payloads: bool = True) -> Rehearsal:
        return Rehearsal()  # passed, having saved and read nothing

    def side(name: str, extra: list[str], rehearse: Any) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            run_dir = root / name
            shutil.rmtree(run_dir, ignore_errors=True)
            cfg = compose([*overrides, *extra], run_dir)
            checkpoint_rehearsal.rehearse = rehearse
            spent.clear()
            try:
                wall, cpu, _ = harness.timed(lambda: train(cfg))
            finally:
                checkpoint_rehearsal.rehearse = real
            assert (run_dir / "results.json").is_file()
            return {
                "wall": wall,
                "cpu": cpu,
                "step0_wall": sum(w for w, _ in spent),
                "step0_cpu": sum(c for _, c in spent),
            }

        return run

    sides = {
        "default": side("default", [], timed_rehearse),
        "no_step0": side("no_step0", [], skipped),
        "lists": side("lists", ["data._target_=features.ListStatsDigits"], timed_rehearse),
        "numpy": side("numpy", ["data._target_=features.NumpyStatsDigits"], timed_rehearse),
    }
    try:
        for run in sides.values():  # warm-up: imports, first-call costs
            run()
        times = interleaved(sides, args.reps)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def median(name: str, key: str) -> float:
        return summary([run[key] for run in times[name]])["median"]

    for name, runs in times.items():
        w, c = summary([r["wall"] for r in runs]), summary([r["cpu"] for r in runs])
        print(
            f"{name:9s} to results.json: {w['median']:.2f} s wall (spread {w['spread']:.1%}), "
            f"{c['median']:.2f} s CPU (spread {c['spread']:.1%})"
        )
    share = summary([r["step0_wall"] / r["wall"] for r in times["default"]])["median"]
    share_cpu = summary([r["step0_cpu"] / r["cpu"] for r in times["default"]])["median"]
    print(
        f"numpy / lists: {median('numpy', 'wall') / median('lists', 'wall'):.3f} wall, "
        f"{median('numpy', 'cpu') / median('lists', 'cpu'):.3f} CPU"
    )
    print(
        f"step-0 check in the default run: {1000 * median('default', 'step0_wall'):.1f} ms, "
        f"{share:.3%} of the run's wall time, {share_cpu:.3%} of its CPU time"
    )
    print(
        f"default / no step-0 check: {median('default', 'cpu') / median('no_step0', 'cpu'):.3f} "
        "CPU (the check's share is below the runs' noise)"
    )
    return dict(
        default_s=median("default", "wall"),
        no_step0_s=median("no_step0", "wall"),
        lists_s=median("lists", "wall"),
        numpy_s=median("numpy", "wall"),
        numpy_over_lists=median("numpy", "wall") / median("lists", "wall"),
        numpy_over_lists_cpu=median("numpy", "cpu") / median("lists", "cpu"),
        step0_s=median("default", "step0_wall"),
        step0_share=share,
        step0_share_cpu=share_cpu,
        default_over_no_step0_cpu=median("default", "cpu") / median("no_step0", "cpu"),
    )


def _rss() -> int:
    """The process's resident set in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _settle() -> None:
    """Free what is garbage and hand freed heap pages back to the OS (glibc keeps them resident):
    otherwise a side's peak hides in pages an earlier side left, and its extra reads as 0."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    libc = ctypes.util.find_library("c")
    if libc is not None and hasattr(ctypes.CDLL(libc), "malloc_trim"):
        ctypes.CDLL(libc).malloc_trim(0)


def _peak_extra(fn: Callable[[], Any]) -> tuple[float, int]:
    """(seconds, peak resident bytes over those before) of fn(), sampled every 0.5 ms, from a
    settled heap."""
    _settle()
    before, peak, done = _rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    return seconds, max(peak[0], _rss()) - before


def large_model(mparams: int, array_mib: int, reps: int) -> dict[str, float]:
    """The step-0 check's extra memory and time on a large model, fresh and resumed."""
    import gc

    import numpy as np
    import torch

    from trainwell.io.checkpoint_write import AtomicCheckpointIO, Rehearsal

    width = 2048
    layers = max(1, round(mparams * 1e6 / (width * width + width)))
    net = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    array = np.random.default_rng(0).random(array_mib * 2**20 // 8)  # float64
    writer = AtomicCheckpointIO()
    params = sum(p.numel() for p in net.parameters())
    print(f"large model: {params / 1e6:.1f}M parameters, AdamW, numpy state {array_mib} MiB")

    def checkpoint() -> dict[str, Any]:
        return {  # Lightning's dump_checkpoint: references to the live tensors, not copies
            "epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6",
            "state_dict": net.state_dict(), "loops": {"fit_loop": {"state_dict": {}}},
            "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
            "callbacks": {"ExactResume": {"rng": [1, 2, 3]}},
            "LargeData": {"mean": array, "count": np.int64(7), "names": ["a", "b"]},
        }  # fmt: skip

    figures: dict[str, float] = {}
    for stage in ("fresh", "resumed"):
        if stage == "resumed":  # one step: AdamW's moments now exist (2x the weights)
            net(torch.zeros(1, width)).sum().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        size = Rehearsal(payloads=True)
        size.run(writer, checkpoint())
        ckpt_bytes = size.bytes
        del size
        gc.collect()

        def side(payloads: bool) -> Callable[[], tuple[float, int]]:
            def run() -> tuple[float, int]:
                rehearsal = Rehearsal(payloads=payloads)
                seconds, extra = _peak_extra(functools.partial(rehearsal.run, writer, checkpoint()))
                assert rehearsal.error is None, rehearsal.error
                rehearsal.loaded = None  # what it read back goes before the next side
                gc.collect()
                return seconds, extra

            return run

        times = interleaved({"check": side(False), "payload": side(True)}, reps)
        for name, runs in times.items():
            seconds = summary([r[0] for r in runs])["median"]
            extra = summary([r[1] for r in runs])["median"]
            key = "" if name == "check" else "payload_"
            figures[f"large_{key}extra_share_{stage}"] = extra / ckpt_bytes
            figures[f"large_{key}s_{stage}"] = seconds
            print(
                f"{stage:8s} checkpoint {ckpt_bytes / 2**20:8.1f} MiB; "
                f"{'step-0 check' if name == 'check' else 'with payloads'}: "
                f"+{extra / 2**20:8.1f} MiB peak ({extra / ckpt_bytes:.2%} of the checkpoint), "
                f"{seconds:.3f} s"
            )
        figures[f"large_ckpt_mib_{stage}"] = ckpt_bytes / 2**20
    return figures


def state_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=None, help="default: the config's")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-runs", action="store_true", help="skip the digits runs")
    parser.add_argument("--large-mparams", type=int, default=0, help="0: no large-model figures")
    parser.add_argument("--array-mib", type=int, default=256)


def run_state(args: argparse.Namespace) -> Figures:
    """What saving numpy state costs a run, and what the step-0 checkpoint check costs the
    default run.

    Four sides, each a full `training.run.train` of the default digits run (the config
    `python scripts/train.py` composes; progress bar and config print off) timed from the call to
    results.json, interleaved: `default` (the run as shipped; its datamodule keeps two Python
    floats); `no_step0` (the same run with the step-0 check, callbacks/checkpoint_rehearsal.py,
    replaced by a no-op: the whole-run cost of the check, within the runs' noise); `lists` /
    `numpy` (digits with a datamodule that also fits per-pixel statistics on the training split
    and keeps them as Python lists and floats, or as numpy arrays and scalars: the same values,
    the same work). The step-0 check is also timed inside every run, and its share of the
    default run is that time over the run's time: the figure that must stay under 2%. Wall and
    CPU seconds are both reported: on a shared machine the CPU time is the steadier figure.

    Last line: `default_s=.. no_step0_s=.. lists_s=.. numpy_s=.. numpy_over_lists=..
    numpy_over_lists_cpu=.. step0_s=.. step0_share=.. step0_share_cpu=..
    default_over_no_step0_cpu=..`

    `--large-mparams N` adds the step-0 check on a large model: an MLP of about N million
    float32 parameters with AdamW, its checkpoint built as Lightning builds it (weights,
    optimizer state, loops, a datamodule state holding a float64 numpy array of `--array-mib`
    MiB), fresh (no optimizer moments yet) and resumed (after one step). Each side is the check
    as the run makes it (tensors as stand-ins of their dtype and shape) beside the check
    carrying every payload: its extra peak memory (the resident set, sampled every half
    millisecond, over its size before the check) and its time, as a share of the checkpoint's
    size. Adds `large_ckpt_mib_<fresh|resumed>`, `large_extra_share_<..>`,
    `large_payload_extra_share_<..>`, `large_s_<..>`, `large_payload_s_<..>`."""
    figures: Figures = {} if args.no_runs else dict(state_runs(args))
    if args.large_mparams:
        figures |= large_model(args.large_mparams, args.array_mib, args.reps)
    return figures


# --- doctor ------------------------------------------------------------------------------------


def run_doctor_once(src: Path, threads: int, run_dir: Path, overrides: list[str]) -> float:
    args = [f"hydra.run.dir={run_dir}", *harness.default_run(), *overrides]
    seconds, _, proc = harness.timed(lambda: script("doctor.py", args, threads, src=src))
    if proc.returncode not in (0, 1):  # 1: a check failed, still a full doctor run
        raise RuntimeError(f"doctor.py exited {proc.returncode}:\n{proc.stdout[-2000:]}")
    return seconds


def doctor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", default=None, help="git ref (default: merge-base with main)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, the same for both sides")


def run_doctor(args: argparse.Namespace) -> Figures:
    """`make doctor` wall time on the default experiment: this checkout against a baseline commit.

    Runs the real `scripts/doctor.py` (what `make doctor` runs) in a subprocess, once per side
    per repetition, the order rotating: `before` imports trainwell from the baseline commit's
    `src/` (exported to a temporary directory with `git archive`), `after` from this checkout's
    `src/`. Everything else (scripts, configs, interpreter, threads) is the same, so the
    difference is the doctor's own code. The budget: under 60 s on this machine's CPU.

    Last line: `before_s=.. after_s=.. ratio=..`."""
    ref = (
        args.baseline
        or subprocess.run(
            ["git", "merge-base", "HEAD", "main"],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    print(f"baseline: {ref}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        before_src = export_tree(ref, root / "base", "src") / "src"
        runs = iter(range(10**6))
        sides = {
            name: (
                lambda src=src: run_doctor_once(
                    src, args.threads, root / f"r{next(runs)}", args.overrides
                )
            )
            for name, src in (("before", before_src), ("after", REPO / "src"))
        }
        times = interleaved(sides, args.reps)
    figures: Figures = {}
    before = figure(figures, "before_s", times["before"], "doctor, baseline", " s")
    after = figure(figures, "after_s", times["after"], "doctor, this checkout", " s")
    return {"before_s": before, "after_s": after, "ratio": after / before}


# --- imbalance ---------------------------------------------------------------------------------

IMBALANCE_SIDES = {
    "plain": [],
    "weighted_sampler": ["data.sampler=weighted"],
    "class_weights": ["model.loss.class_weights=balanced"],
}


def imbalance_run(side: str, args: argparse.Namespace, out: Path) -> dict[str, float]:
    run_dir = out / side
    overrides = [*args.overrides, *([f"trainer.max_epochs={args.epochs}"] if args.epochs else [])]
    cmd = ["experiment=digits_imbalanced", *QUIET, *IMBALANCE_SIDES[side], *overrides]
    if args.in_process:
        from trainwell.training.run import train

        wall, _, _ = harness.timed(lambda: train(compose(cmd, run_dir)))
    else:
        wall, _, proc = harness.timed(
            lambda: script("train.py", [*cmd, f"hydra.run.dir={run_dir}"], args.threads)
        )
        if proc.returncode != 0:
            sys.exit(f"{side} run failed: {proc.stderr.strip().splitlines()[-1:]}")
    metrics = json.loads((run_dir / "results.json").read_text())["metrics"]
    recalls = [v for k, v in metrics.items() if k.startswith("test/recall/")]
    return {
        "acc": metrics["test/acc"],
        "balanced_acc": metrics["test/balanced_acc"],
        "worst_recall": min(recalls),
        "wall_s": wall,
    }


def imbalance_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=None, help="trainer.max_epochs")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="each side a train() call in this process, not a train.py process: the same "
        "figures but a wall time without the start-up (a quick check)",
    )
    parser.add_argument("overrides", nargs="*", help="train.py overrides, the same for every side")


def run_imbalance(args: argparse.Namespace) -> Figures:
    """Plain training vs the two compensations on imbalanced digits (classes 5-9 cut to 10% of
    their training samples; validation and test untouched): accuracy, balanced accuracy,
    worst-class recall and wall time of one train.py run each, side by side (`--in-process`: of
    one `training.run.train` call each, in this process).

    Last line: `<side>_acc=.. <side>_balanced_acc=.. <side>_worst_recall=.. <side>_wall_s=..`."""
    figures: Figures = {}
    with tempfile.TemporaryDirectory(prefix="imbalance-") as tmp:
        print(f"{'side':<18} {'test acc':>9} {'balanced':>9} {'worst rec':>9} {'wall s':>7}")
        for side in IMBALANCE_SIDES:
            got = imbalance_run(side, args, Path(tmp))
            print(
                f"{side:<18} {got['acc']:>9.4f} {got['balanced_acc']:>9.4f} "
                f"{got['worst_recall']:>9.4f} {got['wall_s']:>7.1f}",
                flush=True,
            )
            figures.update({f"{side}_{k}": v for k, v in got.items()})
    return figures


# --- startup -----------------------------------------------------------------------------------

PHASE = "bench-phase"


def _mark(name: str) -> None:
    print(f"{PHASE} {name} {time.time():.6f}", flush=True)


class PhaseMarker(L.Callback):
    """Wall-clock phase markers printed from inside a real `scripts/train.py` run (added with
    `+callbacks.bench_phase._target_=features.PhaseMarker`): the split of `make train` into
    start-up and training comes from the real process, not a re-enactment."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # `stage` is a TrainerFn (a str enum whose f-string form is "TrainerFn.FITTING").
        _mark(f"setup_{getattr(stage, 'value', stage)}")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _mark("train_start")

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _mark("fit_end")
        # Which optional heavy packages this run imported: wandb must not be among them when
        # logger=csv (importing it costs seconds and starts no run, so nobody would notice).
        for name in ("wandb", "tensorboard", "matplotlib", "sklearn", "pandas"):
            print(f"{PHASE} module {name} {int(name in sys.modules)}", flush=True)


IMPORTS = ["torch", "lightning", "hydra", "trainwell.cli", "trainwell.training.run", "wandb"]
HEAVY = {"torch", "lightning", "pytorch_lightning", "torchvision"}
# Mistakes on the command line, each answered in one line with exit 2 ({tmp}: a scratch dir).
MISTAKES = {
    "bad_key": ["trainer.max_epoch=1"],
    "bad_value": ["data.batch_size=0"],
    "missing_ckpt": ["ckpt_path={tmp}/missing/best.ckpt"],
    "bad_keyword": ["+model.net.widht=16"],
    "bad_optimizer_keyword": ["+model.optimizer.weight_decya=0.1"],
    "bad_trainer_keyword": ["+trainer.max_epoch=1"],
}
# Mistakes a baseline may answer only after training starts (exit 1): timed on this checkout alone.
LATE_BEFORE = {"bad_keyword", "bad_optimizer_keyword", "bad_trainer_keyword"}


def run_train(epochs: int, threads: int, run_dir: Path) -> dict[str, float]:
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        *harness.default_run(),
        f"trainer.max_epochs={epochs}",
        f"hydra.run.dir={run_dir}",
        "+callbacks.bench_phase._target_=features.PhaseMarker",
    ]
    start = time.time()
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=child_env(threads),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    marks: dict[str, float] = {}
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.time()
        tail = [*tail[-40:], line]
        if line.startswith(f"{PHASE} module "):
            _, _, module, imported = line.split()
            marks[f"module_{module}"] = float(imported)
        elif line.startswith(PHASE):
            _, name, value = line.split()
            marks[name] = float(value)
        elif line.startswith("run dir:"):
            marks.setdefault("run_dir", now)
        elif line.startswith("training plan:"):
            marks.setdefault("plan", now)
    code = proc.wait()
    end = time.time()
    if code != 0 or "setup_fit" not in marks or "fit_end" not in marks:
        raise RuntimeError(f"train.py failed (exit {code}):\n{''.join(tail)}")
    return {
        "startup": marks["setup_fit"] - start,
        "to_run_dir": marks["run_dir"] - start,  # interpreter + imports + Hydra compose
        "build": marks["plan"] - marks["run_dir"],  # config print, instantiate, Trainer init
        "training": marks["fit_end"] - marks["setup_fit"],
        "test_exit": end - marks["fit_end"],
        "total": end - start,
        "wandb_imported": float(marks.get("module_wandb", 1.0)),
    }


def import_seconds(module: str, threads: int) -> float:
    """Import time of `module` in a fresh interpreter (what every `make train` pays)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=child_env(threads),
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def process_seconds(cmd: list[str], threads: int, expected: int) -> tuple[float, str]:
    """(wall seconds from start to exit, stderr) of a fresh process running `cmd`."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=child_env(threads), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != expected:
        raise RuntimeError(f"{cmd}: exit {proc.returncode}, expected {expected}:\n{proc.stderr}")
    return seconds, proc.stderr


def mistake_cmd(root: Path, name: str, tmp: Path, *options: str) -> list[str]:
    overrides = [o.format(tmp=tmp) for o in MISTAKES[name]]
    script = str(root / "scripts" / "train.py")
    run = [*harness.default_run(), *overrides, f"hydra.run.dir={tmp}/run"]
    return [sys.executable, *options, script, *run]


def time_to_error(root: Path, name: str, tmp: Path, threads: int) -> float:
    """Seconds from starting train.py with the mistake to its exit with the one-line error."""
    seconds, stderr = process_seconds(mistake_cmd(root, name, tmp), threads, expected=2)
    lines = stderr.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("error: "):
        raise RuntimeError(f"{name}: not a one-line error:\n{stderr}")
    return seconds


def heavy_imported(root: Path, name: str, tmp: Path, threads: int) -> list[str]:
    """The heavy packages the mistake's process imported before exiting (from -X importtime)."""
    cmd = mistake_cmd(root, name, tmp, "-X", "importtime")
    _, stderr = process_seconds(cmd, threads, expected=2)
    names = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in stderr.splitlines()
        if line.startswith("import time:")
    }
    if "hydra" not in names:
        raise RuntimeError(f"{name}: no import log read:\n{stderr[-2000:]}")
    return sorted(names & HEAVY)


# Valid starts whose step-0 checks are timed (each in a fresh interpreter, as a start runs them).
STEP0 = {
    "default": harness.DIGITS,
    "lm_accum": harness.Workload(
        "the language-model example",
        ("experiment=lm_accum",),
        ("project.tasks.language_model", "project.models.transformer", "project.data.sequences"),
    ),
}
_STEP0_CODE = """
import sys, time
from pathlib import Path
t0 = time.perf_counter()
from trainwell.command_line import composed
from trainwell.config_values import template_value_problem
from trainwell.keywords import keyword_problem
from trainwell.targets import targets_problem
t1 = time.perf_counter()
cfg = composed(Path(sys.argv[1]), "train", tuple(sys.argv[2:]))
t2 = time.perf_counter()
assert template_value_problem(cfg) is None
t3 = time.perf_counter()
assert targets_problem(cfg) is None
t4 = time.perf_counter()
assert keyword_problem(cfg) is None
t5 = time.perf_counter()
assert "torch" not in sys.modules
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
"""


def step0_seconds(overrides: list[str], threads: int) -> list[float]:
    """(imports, compose, values, targets, keywords) seconds of a valid start's import-free
    checks, in a fresh interpreter."""
    cmd = [sys.executable, "-c", _STEP0_CODE, str(REPO / "conf"), *overrides]
    out = subprocess.run(
        cmd, cwd=REPO, env=child_env(threads), capture_output=True, text=True, check=True
    )
    return [float(v) for v in out.stdout.split()]


def measure_step0(reps: int, threads: int, figures: dict[str, float | int | str]) -> None:
    """The import-free step-0 checks of a valid start (the template's values, every target,
    every keyword) beside composing its config, and as a share of the start up to that point."""
    starts = {name: harness.resolve(workload) for name, workload in STEP0.items()}
    for name in [n for n, o in starts.items() if o is None]:
        print(harness.skip_line(f"start {name!r}", harness.missing(STEP0[name].needs)))
    sides = {n: (lambda o=o: step0_seconds(o, threads)) for n, o in starts.items() if o is not None}
    for name, runs in interleaved(sides, reps).items():
        parts = dict(
            zip(
                ("imports", "compose", "values", "targets", "keywords"),
                zip(*runs, strict=True),
                strict=True,
            )
        )
        checks = [
            v + t + k
            for v, t, k in zip(parts["values"], parts["targets"], parts["keywords"], strict=True)
        ]
        start = [i + c for i, c in zip(parts["imports"], parts["compose"], strict=True)]
        for part in ("compose", "targets", "keywords"):
            figure(figures, f"step0_{name}_{part}_s", parts[part], f"{name}: {part}", "s")
        figure(figures, f"step0_{name}_checks_s", checks, f"{name}: the checks together", "s")
        ratio = statistics.median(c / s for c, s in zip(checks, start, strict=True))
        figures[f"step0_{name}_checks_vs_start"] = ratio
        print(f"{name}: checks / (imports + compose) {ratio:.3f}")


def measure_mistakes(
    reps: int, threads: int, baseline: str | None, figures: dict[str, float | int | str]
) -> None:
    """The mistakes' figures (see the module docstring) into `figures`; with a baseline ref also
    the baseline's (`before_<mistake>_s`), interleaved with this checkout's."""
    with tempfile.TemporaryDirectory(prefix="tw-bench-mistakes-") as scratch:
        tmp = Path(scratch)
        checkouts = {"": REPO}
        if baseline:
            # The baseline's scripts/train.py imports its own src/ (scripts put their checkout's src/
            # first), so the baseline side runs the baseline's code.
            checkouts["before_"] = export_tree(baseline, tmp / "baseline", "src", "scripts", "conf")
        sides = {
            f"{prefix}{name}": (lambda r=root, n=name: time_to_error(r, n, tmp, threads))
            for prefix, root in checkouts.items()
            for name in MISTAKES
            if not (prefix and name in LATE_BEFORE)
        }
        hydra = [sys.executable, "-c", "import hydra"]
        sides["python_import_hydra"] = lambda: process_seconds(hydra, threads, expected=0)[0]
        for side, values in interleaved(sides, reps).items():
            what = "python -c 'import hydra'" if side == "python_import_hydra" else side
            figure(figures, f"{side}_s", values, f"{what}: start -> exit", "s", spread=True)
        floor = figures["python_import_hydra_s"]
        for side in sides:
            if side != "python_import_hydra":
                figures[f"{side}_vs_hydra"] = figures[f"{side}_s"] / floor
                print(f"{side} / python -c 'import hydra': {figures[f'{side}_vs_hydra']:.2f}")
        if baseline:
            for name in sorted(set(MISTAKES) - LATE_BEFORE):
                figures[f"{name}_vs_before"] = figures[f"{name}_s"] / figures[f"before_{name}_s"]
                print(f"{name} / before ({baseline}): {figures[f'{name}_vs_before']:.3f}")
        for prefix, root in checkouts.items():
            names = [n for n in MISTAKES if not (prefix and n in LATE_BEFORE)]
            found = {name: heavy_imported(root, name, tmp, threads) for name in names}
            for name, heavy in found.items():
                print(f"{prefix}{name}: imported before the error: {', '.join(heavy) or 'none'}")
            figures[f"{prefix}heavy_imported_on_error"] = int(any(found.values()))


def startup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=5, help="trainer.max_epochs (make train: 20)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--import-reps", type=int, default=2, help="0: no import times (a quick check of the rest)"
    )
    parser.add_argument("--error-reps", type=int, default=5, help="repetitions of each mistake")
    parser.add_argument(
        "--errors-only", action="store_true", help="only the mistakes (no training run)"
    )
    parser.add_argument(
        "--baseline", default=None, help="git ref whose mistakes are timed beside this checkout's"
    )


def run_startup(args: argparse.Namespace) -> Figures:
    """P5: `make train` wall time split into start-up and training, what start-up is made of, and how
    long a mistake on the command line takes to be answered (`--errors-only`: the mistakes alone,
    under a minute; `--baseline main`: beside main's).

    Mistakes (measured first): the wall time from starting `scripts/train.py` to its exit with the
    one-line error (exit 2), for a mistyped key (`trainer.max_epoch=1`), a bad value
    (`data.batch_size=0`), a checkpoint that does not exist (`ckpt_path=<missing>`) and a misspelt
    constructor keyword (`+model.net.widht=16`, the optimizer's, the Trainer's), beside the
    wall time of a bare `python -c 'import hydra'` (the floor: every script composes its config with
    Hydra), each a fresh process, every side once per repetition. With `--baseline <git ref>` the
    same mistakes run on that ref's scripts, configs and src/ in the same rotation (`before_*`; the
    keywords only where the ref answers them before training: LATE_BEFORE lists those it may not).
    Then each mistake once more under `python -X importtime`: whether torch, Lightning or torchvision
    was imported before the error (independent of the machine's load; 0 is the goal).

    Valid starts (default, experiment=lm_accum): the import-free step-0 checks (the template's
    values, every `_target_` located, every keyword against its signature), each a fresh interpreter,
    beside composing the config: `step0_<exp>_checks_s` and `step0_<exp>_checks_vs_start` (the
    checks over imports + compose).

    Training: runs the real `scripts/train.py` (what `make train` runs) in a subprocess with a
    phase-marker callback and splits its wall time into:
      start-up: process start -> Lightning's fit setup hook (interpreter, imports, Hydra compose,
                config print, datamodule/task/Trainer construction, training plan)
      training: fit setup -> end of fit (sanity check, epochs, validation, checkpoints)
      test+exit: test of the best checkpoint, results.json, interpreter shutdown
    Then the import time of torch / lightning / hydra / trainwell.training.run / wandb, each in a fresh
    interpreter (`--import-reps 0`: not timed, their figures left out), and whether wandb was
    imported by the logger=csv run (it must not be).

    Last line: `startup_s=.. training_s=.. test_exit_s=.. total_s=.. import_trainwell_s=..
    import_lightning_s=.. import_wandb_s=.. wandb_imported=0|1` then the mistakes' figures:
    `bad_key_s=.. bad_value_s=.. missing_ckpt_s=.. python_import_hydra_s=.. <mistake>_vs_hydra=..
    heavy_imported_on_error=0|1` (with --baseline also `before_<mistake>_s`, `<mistake>_vs_before`
    and `before_heavy_imported_on_error`). --errors-only prints the mistakes' figures alone."""
    figures: Figures = {}
    measure_mistakes(args.error_reps, args.threads, args.baseline, figures)
    measure_step0(args.error_reps, args.threads, figures)
    mistakes = dict(figures)
    if args.errors_only:
        return mistakes
    with tempfile.TemporaryDirectory(prefix="tw-bench-startup-") as tmp:

        def report(rep: int, results: dict[str, dict[str, float]]) -> None:
            times = results["train"].items()
            line = " ".join(f"{k} {v:.2f}s" for k, v in times if k != "wandb_imported")
            print(f"[rep {rep}] {line}", flush=True)

        run_dirs = (Path(tmp) / f"run{rep}" for rep in itertools.count())

        def train_once() -> dict[str, float]:
            return run_train(args.epochs, args.threads, next(run_dirs))

        runs = interleaved({"train": train_once}, args.reps, report)["train"]
    for key in ("startup", "to_run_dir", "build", "training", "test_exit", "total"):
        values = [r[key] for r in runs]
        figure(figures, f"{key}_s", values, f"train.py {key}", "s", spread=key == "startup")
    wandb_imported = int(max(r["wandb_imported"] for r in runs))
    print(f"wandb imported by the logger=csv run: {bool(wandb_imported)}")
    # Interleaved, so load drift hits every module alike.
    imports = interleaved(
        {m: (lambda m=m: import_seconds(m, args.threads)) for m in IMPORTS}, args.import_reps
    )
    for module, values in imports.items():
        if values:
            figure(figures, module, values, f"import {module} (fresh interpreter)", "s")
    import_figures = (
        dict(
            import_trainwell_s=figures["trainwell.training.run"],
            import_lightning_s=figures["lightning"],
            import_wandb_s=figures["wandb"],
        )
        if args.import_reps > 0
        else {}
    )
    return dict(
        startup_s=figures["startup_s"],
        training_s=figures["training_s"],
        test_exit_s=figures["test_exit_s"],
        total_s=figures["total_s"],
        startup_spread=figures["startup_s_spread"],
        **import_figures,
        wandb_imported=wandb_imported,
        **mistakes,
    )


# --- memory ------------------------------------------------------------------------------------

MIB = 2**20


def build_net(width: int, checkpointing: bool, device: torch.device) -> nn.Module:
    """The net exactly as `model=resnet18` configures it, with the two knobs set."""
    from hydra.utils import instantiate

    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(
            [
                "model=resnet18",
                f"model.net.width={width}",
                f"model.net.grad_checkpointing={str(checkpointing).lower()}",
            ],
            Path(tmp),
        )
    torch.manual_seed(0)
    return instantiate(cfg.model.net).to(device).train()


def make_step(
    net: nn.Module, batch: int, accumulate: int, device: torch.device
) -> Callable[[], int]:
    """One optimizer step over `accumulate` micro-batches of `batch` images; returns images."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(batch, 3, 32, 32, generator=gen).to(device) for _ in range(accumulate)]
    ys = [torch.randint(0, 10, (batch,), generator=gen).to(device) for _ in range(accumulate)]

    def step() -> int:
        for x, y in zip(xs, ys, strict=True):
            loss = nn.functional.cross_entropy(net(x), y) / accumulate
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return batch * accumulate

    return step


def peak_memory(step: Callable[[], int], device: torch.device) -> dict[str, float]:
    """Peak activation and total memory (MiB) of one step, by the method stated in the doc."""
    step()  # warm-up: optimizer state exists, as in every step after the first
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        return {"activation": (peak - before) / MIB, "total": peak / MIB}
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import (
        _CATEGORY_TO_INDEX,
        Category,
        MemoryProfileTimeline,
    )

    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        step()
    # Private API (torch 2.1+), the data behind prof.export_memory_timeline(): columns are
    # 1 + _CATEGORY_TO_INDEX[category], rows are cumulative sizes over time.
    _, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline(device)
    activation = 1 + _CATEGORY_TO_INDEX[Category.ACTIVATION]
    return {
        "activation": max(row[activation] for row in sizes) / MIB,
        "total": max(sum(row) for row in sizes) / MIB,
    }


def time_steps(steps: dict[str, Callable[[], int]], reps: int, device: torch.device) -> dict:
    """Seconds per step and images/s for each named step, interleaved, median over reps."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for fn in steps.values():
        fn()  # warm-up

    def timed_step(fn: Callable[[], int]) -> tuple[float, int]:
        sync()
        begin = time.perf_counter()
        images = fn()
        sync()  # the step's kernels are done when the clock is read
        return time.perf_counter() - begin, images

    runs = interleaved({k: (lambda fn=fn: timed_step(fn)) for k, fn in steps.items()}, reps)
    return {k: ([s for s, _ in v], v[-1][1]) for k, v in runs.items()}


def memory_method(device: torch.device) -> str:
    return (
        "torch.cuda.max_memory_allocated"
        if device.type == "cuda"
        else "torch profiler memory timeline"
    )


def memory_sides(
    width: int, batch: int, reps: int, device: torch.device, sides: dict[str, tuple[bool, int]]
) -> tuple[dict[str, dict[str, float]], dict[str, float], dict[str, float]]:
    """Per side (grad checkpointing, K micro-batches making up `batch` images): the peak
    memory of one optimizer step (MiB: activation, total), its median seconds over interleaved
    repetitions and its img/s, each side's line printed."""
    method = memory_method(device)
    nets = {
        name: make_step(build_net(width, checkpointing, device), batch // k, k, device)
        for name, (checkpointing, k) in sides.items()
    }
    memory = {name: peak_memory(step, device) for name, step in nets.items()}
    timing = time_steps(nets, reps, device)
    for name in nets:
        secs, imgs = timing[name]
        print(
            f"{name}: peak activation {memory[name]['activation']:.1f} MiB, peak total "
            f"{memory[name]['total']:.1f} MiB ({method}); "
            + describe("s/step", secs, "s")
            + f"; {imgs / statistics.median(secs):.1f} img/s"
        )
    step_s = {name: statistics.median(timing[name][0]) for name in nets}
    img_s = {name: timing[name][1] / step_s[name] for name in nets}
    return memory, step_s, img_s


def memory_title(args: argparse.Namespace) -> str:
    device = torch.device(args.device)
    return f"P3/P4 memory on {device.type} ({memory_method(device)}), ResNet-18 width {args.width}"


def memory_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--width", type=int, default=16, help="ResNet-18 base width (64 = paper)")
    parser.add_argument("--batch", type=int, default=32, help="images per optimizer step")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")


def run_memory(args: argparse.Namespace) -> Figures:
    """P3/P4: memory trade-offs of gradient checkpointing and of gradient accumulation.

        .venv/bin/python benchmarks/features.py memory           # CPU, ResNet-18 width 16, batch 32
        .venv/bin/python benchmarks/features.py memory --width 64 --batch 128 --device cuda

    P3: ResNet-18 (the config's net, `model.net.grad_checkpointing` off/on) at one micro-batch:
        peak activation memory and peak total memory of one training step, and step time.
    P4: accumulation K=1 at batch B vs K=4 at batch B/4 (equal effective batch B): peak memory of
        one optimizer step and images/s.

    How memory is measured (stated with every figure):
      cpu  the torch profiler's memory view (profile_memory=True; its timeline of allocations by
           category: ACTIVATION, GRADIENT, PARAMETER, OPTIMIZER_STATE, TEMPORARY, ...), peak of the
           ACTIVATION category and peak of the sum of all categories during one step.
      cuda torch.cuda.max_memory_allocated() around one step (after reset_peak_memory_stats);
           activation peak = that peak minus what was allocated before the forward.
    Times are medians of interleaved repetitions (profiling off).

    Last line: `ckpt_act_ratio=.. ckpt_peak_ratio=.. ckpt_time_ratio=.. accum_peak_ratio=..
    accum_throughput_ratio=..` (on/off and K=4/K=1 ratios) plus the absolute MiB and img/s.
    """
    device = torch.device(args.device)
    if args.batch % 4:
        raise SystemExit("--batch must be divisible by 4 (K=4 at equal effective batch)")
    sides = {"ckpt_off": (False, 1), "ckpt_on": (True, 1), "k4": (False, 4)}
    memory, step_s, img_s = memory_sides(args.width, args.batch, args.reps, device, sides)
    return dict(
        device=device.type,
        ckpt_off_act_mib=memory["ckpt_off"]["activation"],
        ckpt_on_act_mib=memory["ckpt_on"]["activation"],
        ckpt_act_ratio=memory["ckpt_on"]["activation"] / memory["ckpt_off"]["activation"],
        ckpt_peak_ratio=memory["ckpt_on"]["total"] / memory["ckpt_off"]["total"],
        ckpt_time_ratio=step_s["ckpt_on"] / step_s["ckpt_off"],
        k1_peak_mib=memory["ckpt_off"]["total"],
        k4_peak_mib=memory["k4"]["total"],
        accum_peak_ratio=memory["k4"]["total"] / memory["ckpt_off"]["total"],
        k1_img_s=img_s["ckpt_off"],
        k4_img_s=img_s["k4"],
        accum_throughput_ratio=img_s["k4"] / img_s["ckpt_off"],
    )


# --- data_pipeline -----------------------------------------------------------------------------

TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]


def write_cifar10(root: Path, images: int, seed: int = 0) -> dict[str, str]:
    """`images` train images over the 5 real batch files + a test file of images/10; file -> md5.

    The same format torchvision reads (tests/helpers/cifar_fixture.py writes a tiny one for tests).
    """
    from torchvision.datasets import CIFAR10

    rng = np.random.default_rng(seed)
    folder = root / CIFAR10.base_folder
    folder.mkdir(parents=True, exist_ok=True)
    md5 = {}
    sizes = {name: images // 5 for name in TRAIN_BATCHES} | {"test_batch": max(images // 10, 10)}
    for name, n in sizes.items():
        data = rng.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)
        entry = {"batch_label": name, "labels": (np.arange(n) % 10).tolist(), "data": data}
        (folder / name).write_bytes(pickle.dumps(entry))
        md5[name] = hashlib.md5((folder / name).read_bytes()).hexdigest()
    meta = {"label_names": [f"class{i}" for i in range(10)]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    md5["batches.meta"] = hashlib.md5((folder / "batches.meta").read_bytes()).hexdigest()
    return md5


def trust_fixture(md5: dict[str, str]) -> None:
    """torchvision checks the real files' md5 sums; point its (class-level) list at ours so the
    real integrity check and loader run unchanged on the fixture."""
    from torchvision.datasets import CIFAR10

    CIFAR10.train_list = [[n, md5[n]] for n in TRAIN_BATCHES]
    CIFAR10.test_list = [["test_batch", md5["test_batch"]]]
    CIFAR10.meta = {**CIFAR10.meta, "md5": md5["batches.meta"]}


def run_setting(
    data_dir: Path,
    val_size: int,
    workers: int,
    pin: bool,
    persistent: bool,
    args: argparse.Namespace,
) -> dict[str, float]:
    from hydra.utils import instantiate

    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(
            [
                "experiment=resnet_accum",
                f"data.data_dir={data_dir}",
                f"data.val_size={val_size}",
                f"data.batch_size={args.batch}",
                f"data.num_workers={workers}",
                f"data.pin_memory={str(pin).lower()}",
                f"data.persistent_workers={str(persistent).lower()}",
                f"model.net.width={args.width}",
            ],
            Path(tmp),
        )
    dm = instantiate(cfg.data)
    dm.setup("fit")
    torch.manual_seed(0)
    net = instantiate(cfg.model.net).to(args.device).train()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loader = dm.train_dataloader()
    wait = total = 0.0
    images = 0
    start_all = time.perf_counter()
    for epoch in range(args.epochs):
        set_sampler_epoch(loader, epoch)  # what Lightning does (a no-op for a plain shuffle)
        it = iter(loader)  # worker start-up (without persistent workers) counts as waiting
        for _ in range(args.batches):
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            x = x.to(args.device, non_blocking=True)
            y = y.to(args.device, non_blocking=True)
            t1 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if args.device == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
            wait += t1 - t0
            total += t2 - t0
            images += y.shape[0]
        del it
    elapsed = time.perf_counter() - start_all
    return {
        "wait": wait / total if total else float("nan"),
        "img_s": images / elapsed,
        "pin_effective": float(dm.pin_memory),
        "persistent_effective": float(dm.persistent_workers),
    }


def setting_key(workers: int, pin: bool, persistent: bool) -> str:
    return f"w{workers}{'_pin' if pin else ''}{'_pers' if persistent else ''}"


def data_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="a real CIFAR-10 (default: fixture)"
    )
    parser.add_argument("--images", type=int, default=10_000, help="fixture size")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--pin", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--persistent", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=8, help="steps per epoch")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--width", type=int, default=8, help="ResNet-18 width of the consumer")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")


def run_data_pipeline(args: argparse.Namespace) -> Figures:
    """P6: CIFAR-10 input pipeline from disk: num_workers / pin_memory / persistent_workers sweep.

        .venv/bin/python benchmarks/features.py data_pipeline       # 10k-image fixture in /tmp
        .venv/bin/python benchmarks/features.py data_pipeline --data-dir data/cifar10 --workers 0 2 4 8

    Writes a 10,000-image CIFAR-10 in the real on-disk format (cifar-10-batches-py pickles: 5 train
    batches + a test batch) unless --data-dir points at a real one, then trains the configured
    ResNet-18 (`experiment=resnet_accum data.data_dir=...`, its augmenting train loader) for a few
    epochs per setting, timing how long each step waits for its batch (`next(loader)`) versus the
    whole step. data-wait fraction = wait / step time: near 0 means the model is the bottleneck.

    Every setting is run through the datamodule the config builds
    (project.data.cifar10.CIFAR10DataModule), so its own rules apply: pin_memory is forced off
    without CUDA (nothing to pin for), and persistent_workers only means something with
    workers > 0.

    Last line: `best=w0 best_img_s=.. w0_img_s=.. w0_wait=.. ...`, per setting its img/s and
    data-wait fraction.
    """
    with tempfile.TemporaryDirectory(prefix="tw-bench-cifar-") as tmp:
        data_dir = args.data_dir
        val_size = 5000
        if data_dir is None:
            data_dir = Path(tmp) / "cifar10"
            trust_fixture(write_cifar10(data_dir, args.images))
            val_size = args.images // 10
            print(f"fixture: {args.images} train images (real format) in {data_dir}")
        settings = []
        for workers, pin, persistent in itertools.product(args.workers, args.pin, args.persistent):
            if persistent and not workers:
                continue  # no workers to keep alive
            if pin and not torch.cuda.is_available():
                continue  # the datamodule turns pin_memory off without CUDA: same as pin=0
            settings.append((workers, bool(pin), bool(persistent)))
        if not torch.cuda.is_available():
            print(
                "pin_memory=1 skipped: no CUDA here, the datamodule forces it off (nothing to pin)"
            )
        print(
            f"host has {torch.get_num_threads()} torch thread(s) and {os.cpu_count()} CPUs: "
            "workers compete with the training process for the same cores"
        )
        results = interleaved(
            {
                setting_key(*s): (lambda s=s: run_setting(data_dir, val_size, *s, args))
                for s in settings
            },
            args.reps,
        )
    figures: Figures = {}
    best, best_rate = None, -1.0
    for (workers, pin, persistent), (key, rows) in zip(settings, results.items(), strict=True):
        wait = statistics.median(r["wait"] for r in rows)
        rate = statistics.median(r["img_s"] for r in rows)
        spread = summary([r["img_s"] for r in rows])["spread"]
        print(
            f"{key}: num_workers={workers} pin_memory={int(pin)} persistent_workers="
            f"{int(persistent)}: {rate:.1f} img/s (+/-{100 * spread:.1f}%), data-wait {100 * wait:.1f}%"
        )
        figures[f"{key}_img_s"] = rate
        figures[f"{key}_wait"] = wait
        if rate > best_rate:
            best, best_rate = key, rate
    return {"best": str(best), "best_img_s": best_rate, **figures}


# --- the runner --------------------------------------------------------------------------------


FEATURES: dict[str, harness.Part] = {
    "startup": harness.Part(
        lambda a: (
            "P5 start-up: mistakes answered, and make train (scripts/train.py) split into phases"
        ),
        startup_arguments,
        run_startup,
        workload=harness.DIGITS,
    ),
    "guards": harness.Part(
        lambda a: "guard overhead: default experiment, guards on vs off",
        guards_arguments,
        run_guards,
        workload=harness.DIGITS,
    ),
    "ema": harness.Part(
        lambda a: f"EMA cost per optimizer step: {' '.join(a.override) or 'digits'}",
        ema_arguments,
        run_ema,
        workload=harness.DIGITS,
    ),
    "cv": harness.Part(
        lambda a: f"cv overhead: digits, {a.folds} folds",
        cv_arguments,
        run_cv,
        workload=harness.DIGITS,
    ),
    "summary": harness.Part(
        lambda a: f"summary cost per job: sweeps of {a.sizes} jobs",
        summary_arguments,
        run_summary,
        workload=harness.DIGITS,
    ),
    "resume": harness.Part(
        lambda a: "resume_position: process start -> first resumed step, at 5% vs 95% of an epoch",
        resume_arguments,
        run_resume,
        workload=RESUMED,
    ),
    "state": harness.Part(
        lambda a: "state checkpoint: digits, numpy vs lists, step-0 share",
        state_arguments,
        run_state,
        needs=harness.DIGITS.needs,  # its datamodules extend the digits example's
    ),
    "doctor": harness.Part(
        lambda a: (
            "doctor time: scripts/doctor.py on "
            f"{' '.join(a.overrides) or 'the default experiment'}, baseline vs this checkout"
        ),
        doctor_arguments,
        run_doctor,
        threads=0,
        workload=harness.DIGITS,
    ),
    "imbalance": harness.Part(
        lambda a: "class imbalance: plain vs weighted sampler vs class weights",
        imbalance_arguments,
        run_imbalance,
        threads=0,
        needs=harness.DIGITS.needs,  # experiment=digits_imbalanced
    ),
    # ResNet-18's own gradient checkpointing (model=resnet18)
    "memory": harness.Part(memory_title, memory_arguments, run_memory, needs=harness.RESNET),
    "data_pipeline": harness.Part(
        lambda a: "P6 data pipeline: CIFAR-10 format from disk, loader settings sweep",
        data_pipeline_arguments,
        run_data_pipeline,
        needs=("project.data.cifar10", *harness.RESNET),  # experiment=resnet_accum from disk
    ),
}


if __name__ == "__main__":
    sys.exit(harness.run_parts(__doc__ or "", FEATURES))
