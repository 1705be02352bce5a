"""Mid-epoch resume: time from process start to the first resumed training step, at 5% and at
95% of an epoch. A resume that loads (and discards) the consumed batches grows with the position;
one that starts the sampler at the saved position costs the same anywhere in the epoch.

    .venv/bin/python benchmarks/resume_position.py                       # 20,000 samples, 5 reps
    .venv/bin/python benchmarks/resume_position.py --samples 640 --reps 1

Setup, once per position: the real `scripts/train.py` (CIFAR-shaped synthetic data with the
host-side crop + flip, an MLP, no workers) is SIGKILLed right after the step checkpoint written
at that position. Then, interleaved, each rep copies one of the two killed run dirs and runs
`train.py resume=auto` into the copy with a callback that prints the wall clock at the first
resumed training step and ends the process there.

Then, in this process, the loader alone: the train loader `train.py` builds, restored to each
position, timed from `iter()` to its first batch (what a resume adds at that position, without
the process start-up's noise).

Last line: `resume_5pct_s=.. resume_95pct_s=.. ratio_95_to_5=.. loader_5pct_ms=..
loader_95pct_ms=.. batches_5pct=.. batches_95pct=.. epoch_batches=..` (medians over the reps;
ratio ~1.0 within the spread means constant time).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
from harness import REPO, child_env, compose, figure, final_line, interleaved, parse_args

MARK = "bench-resume"
TITLE = "resume_position: process start -> first resumed step, at 5% vs 95% of an epoch"


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


def overrides(samples: int, batch: int) -> list[str]:
    return [
        "model=mlp",
        "data=synthetic",
        "data.augment=true",
        f"data.num_samples={samples}",
        "data.num_val=64",
        "data.num_test=64",
        f"data.batch_size={batch}",
        "data.num_workers=0",
        "trainer.max_epochs=1",
        "trainer.num_sanity_val_steps=0",
        "callbacks.early_stopping=null",
        "callbacks.rich_progress_bar=null",
        "callbacks.rich_model_summary=null",
        "print_config=false",
        "test=false",
    ]


def killed_run(run_dir: Path, step: int, args: argparse.Namespace) -> None:
    cmd = [
        sys.executable, str(REPO / "scripts" / "train.py"), *overrides(args.samples, args.batch),
        f"callbacks.step_checkpoint.every_n_train_steps={step}",
        "+callbacks.bench_kill._target_=resume_position.KillAfterStep",
        f"+callbacks.bench_kill.step={step}", f"+callbacks.bench_kill.ckpt_dir={run_dir}/checkpoints",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO, env=child_env(args.threads), capture_output=True, text=True
    )
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the run to resume did not die at step {step}:\n{proc.stderr[-3000:]}")


def time_resume(source: Path, scratch: Path, args: argparse.Namespace) -> tuple[float, int]:
    """(seconds from process start to the first resumed step, the step it resumed at)."""
    run_dir = scratch / f"resume-{time.monotonic_ns()}"
    shutil.copytree(source, run_dir)
    cmd = [
        sys.executable, str(REPO / "scripts" / "train.py"), *overrides(args.samples, args.batch),
        "resume=auto", "+callbacks.bench_first._target_=resume_position.FirstResumedStep",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    start = time.time()
    proc = subprocess.run(
        cmd, cwd=REPO, env=child_env(args.threads), capture_output=True, text=True
    )
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

    cfg = compose(overrides(args.samples, args.batch), scratch / "in-process")
    datamodule = instantiate(cfg.data)
    install_loader_policy(datamodule, seed=int(cfg.seed))
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()
    compat.set_sampler_epoch(loader, 0)
    loader.load_state_dict({"epoch": 0, "batches": step, "epoch_batches": len(loader)})
    start = time.perf_counter()
    next(iter(loader))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000, help="train samples (one epoch)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=5)
    args = parse_args(parser, argv, TITLE)
    epoch_batches = -(-args.samples // args.batch)
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
    figures: dict[str, float | int | str] = {}
    for name, values in in_process.items():
        label = f"loader iter() -> first batch at {name}"
        figure(figures, f"loader_{name}_ms", [1000 * v for v in values], label, " ms")
    for name, values in runs.items():
        label = f"start -> first resumed step at {name}"
        figure(figures, f"resume_{name}_s", [s for s, _ in values], label, " s")
    final_line(
        resume_5pct_s=figures["resume_5pct_s"],
        resume_95pct_s=figures["resume_95pct_s"],
        ratio_95_to_5=figures["resume_95pct_s"] / figures["resume_5pct_s"],
        loader_5pct_ms=figures["loader_5pct_ms"],
        loader_95pct_ms=figures["loader_95pct_ms"],
        batches_5pct=runs["5pct"][0][1],
        batches_95pct=runs["95pct"][0][1],
        epoch_batches=epoch_batches,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
