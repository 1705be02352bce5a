"""P5: `make train` wall time split into start-up and training, and what start-up is made of.

    .venv/bin/python benchmarks/startup.py                  # default experiment, 5 epochs, 3 reps
    .venv/bin/python benchmarks/startup.py --epochs 1 --reps 1

Runs the real `scripts/train.py` (what `make train` runs) in a subprocess with a phase-marker
callback and splits its wall time into:
  start-up: process start -> Lightning's fit setup hook (interpreter, imports, Hydra compose,
            config print, datamodule/task/Trainer construction, training plan)
  training: fit setup -> end of fit (sanity check, epochs, validation, checkpoints)
  test+exit: test of the best checkpoint, results.json, interpreter shutdown
Then the import time of torch / lightning / hydra / trainwell.training.run / wandb, each in a fresh
interpreter, and whether wandb was imported by the logger=csv run (it must not be).

Last line: `startup_s=.. training_s=.. test_exit_s=.. total_s=.. import_trainwell_s=..
import_lightning_s=.. import_wandb_s=.. wandb_imported=0|1`.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO, child_env, figure, final_line, interleaved, parse_args
from phase_marker import MARK

TITLE = "P5 start-up: make train (scripts/train.py, default experiment) split into phases"
IMPORTS = ["torch", "lightning", "hydra", "trainwell.cli", "trainwell.training.run", "wandb"]


def run_train(epochs: int, threads: int, run_dir: Path) -> dict[str, float]:
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        f"trainer.max_epochs={epochs}",
        f"hydra.run.dir={run_dir}",
        "+callbacks.bench_phase._target_=phase_marker.PhaseMarker",
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
        if line.startswith(f"{MARK} module "):
            _, _, module, imported = line.split()
            marks[f"module_{module}"] = float(imported)
        elif line.startswith(MARK):
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5, help="trainer.max_epochs (make train: 20)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--import-reps", type=int, default=2)
    args = parse_args(parser, argv, TITLE)
    with tempfile.TemporaryDirectory(prefix="tw-bench-startup-") as tmp:

        def report(rep: int, results: dict[str, dict[str, float]]) -> None:
            times = results["train"].items()
            line = " ".join(f"{k} {v:.2f}s" for k, v in times if k != "wandb_imported")
            print(f"[rep {rep}] {line}", flush=True)

        run_dirs = (Path(tmp) / f"run{rep}" for rep in itertools.count())

        def train_once() -> dict[str, float]:
            return run_train(args.epochs, args.threads, next(run_dirs))

        runs = interleaved({"train": train_once}, args.reps, report)["train"]
    figures: dict[str, float | int | str] = {}
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
        figure(figures, module, values, f"import {module} (fresh interpreter)", "s")
    final_line(
        startup_s=figures["startup_s"],
        training_s=figures["training_s"],
        test_exit_s=figures["test_exit_s"],
        total_s=figures["total_s"],
        startup_spread=figures["startup_s_spread"],
        import_trainwell_s=figures["trainwell.training.run"],
        import_lightning_s=figures["lightning"],
        import_wandb_s=figures["wandb"],
        wandb_imported=wandb_imported,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
