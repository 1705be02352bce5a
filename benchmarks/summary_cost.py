"""What a multirun costs: the time each job's end spends on summary.json/.md/.png, and (with
`--packed`) the wall time of trials packed side by side (launcher=local) against one at a time.

    .venv/bin/python benchmarks/summary_cost.py                      # sweeps of 6 and 60 jobs
    .venv/bin/python benchmarks/summary_cost.py --sizes 6,60,240 --reps 3
    .venv/bin/python benchmarks/summary_cost.py --sizes 2 --reps 1 --packed 4   # + 4 packed trials

A real sweep job is trained once (`train.py -m seed=1`, a few batches) for real files: its
results.json, .hydra/ and the sweep's multirun.yaml. From them, sweeps of N jobs
(`seed=1..N/2 model.optimizer.lr=0.001,0.003`) are played back job by job: before job k's end
the dir holds jobs 0..k-1 with results, job k's dir about to get them and no dir yet for the
rest, exactly as under the basic launcher; then the Hydra callback's `on_job_end` runs as Hydra
calls it (it rebuilds the summary from every job's files, and at the last job draws the plot).
Each job's results differ (a seeded perturbation), so every update does the full work.

Per sweep size: the mean over the sweep's job ends (the cost each job adds, the plot included),
and the slowest job end. Target: at most 0.2 s per job. Last line:
`per_job_s_6=.. max_s_6=.. per_job_s_60=.. max_s_60=..`.

`--packed N`: N trials of the default experiment (`seed=1..N`) as one sweep run one at a time
(the basic launcher) and as one sweep with `launcher=local hydra.launcher.slots=2`, every trial
at the same CPU threads (cores / 2, what the packed slots get). Figures: both wall times, their
ratio, and whether every trial's results.json metrics are equal in both sweeps (they must be:
`packed_equal=1`). Minutes: full default runs.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from harness import REPO, child_env, figure, final_line, interleaved, parse_args

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
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train.py"), "-m", "seed=1", *TINY,
         f"hydra.sweep.dir={sweep}"],
        cwd=REPO, env=child_env(threads), capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"the real sweep job failed:\n{proc.stderr[-3000:]}")
    return sweep


def play_back(real: Path, out: Path, n: int, seed: int) -> list[float]:
    """A sweep of `n` jobs ending one after the other; the seconds each job's end spent on the
    summary (the callback's on_job_end)."""
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
    summary = json.loads((out / "summary.json").read_text())
    assert summary["jobs"] == {"done": n, "failed": 0, "missing": 0}, summary["jobs"]
    assert (out / "summary.png").is_file()
    return costs


def sweep(out: Path, threads: int, trials: int, *launcher: str) -> tuple[float, list[dict]]:
    """(wall seconds, each trial's results.json metrics) of `train.py -m seed=1..trials`."""
    seeds = ",".join(str(s) for s in range(1, trials + 1))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train.py"), "-m", *launcher, f"seed={seeds}",
         "print_config=false", f"hydra.sweep.dir={out}"],
        cwd=REPO, env=child_env(threads), capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the sweep {' '.join(launcher) or 'one at a time'} failed:\n"
                         f"{proc.stderr[-3000:]}")  # fmt: skip
    metrics = [json.loads((out / str(k) / "results.json").read_text())["metrics"]
               for k in range(trials)]  # fmt: skip
    return wall, metrics


def packed(root: Path, trials: int) -> dict[str, float | int | str]:
    """One-at-a-time against two at a time (launcher=local), at the packed trials' threads."""
    import os

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="6,60", help="sweep sizes (even numbers of jobs)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--packed", type=int, default=0, help="also N default trials, packed vs one at a time"
    )
    args = parse_args(parser, argv, lambda a: f"summary cost per job: sweeps of {a.sizes} jobs")
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
        figures: dict[str, float | int | str] = {}
        for n in sizes:
            means = [sum(costs) / len(costs) for costs in runs[str(n)]]
            figure(figures, f"per_job_s_{n}", means, f"{n} jobs: summary per job end", " s")
            figure(
                figures, f"max_s_{n}", [max(c) for c in runs[str(n)]],
                f"{n} jobs: slowest job end (the last: the plot)", " s",
            )  # fmt: skip
        if args.packed:
            figures |= packed(root, args.packed)
        final_line(**figures)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
