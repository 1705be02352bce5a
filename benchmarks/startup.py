"""P5: `make train` wall time split into start-up and training, what start-up is made of, and how
long a mistake on the command line takes to be answered.

    .venv/bin/python benchmarks/startup.py                  # default experiment, 5 epochs, 3 reps
    .venv/bin/python benchmarks/startup.py --epochs 1 --reps 1
    .venv/bin/python benchmarks/startup.py --errors-only    # the mistakes alone (under a minute)
    .venv/bin/python benchmarks/startup.py --errors-only --baseline main   # ... beside main's

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
interpreter, and whether wandb was imported by the logger=csv run (it must not be).

Last line: `startup_s=.. training_s=.. test_exit_s=.. total_s=.. import_trainwell_s=..
import_lightning_s=.. import_wandb_s=.. wandb_imported=0|1` then the mistakes' figures:
`bad_key_s=.. bad_value_s=.. missing_ckpt_s=.. python_import_hydra_s=.. <mistake>_vs_hydra=..
heavy_imported_on_error=0|1` (with --baseline also `before_<mistake>_s`, `<mistake>_vs_before`
and `before_heavy_imported_on_error`). --errors-only prints the mistakes' figures alone.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO, child_env, figure, final_line, interleaved, parse_args
from phase_marker import MARK

TITLE = "P5 start-up: mistakes answered, and make train (scripts/train.py) split into phases"
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


def process_seconds(cmd: list[str], threads: int, expected: int) -> tuple[float, str]:
    """(wall seconds from start to exit, stderr) of a fresh process running `cmd`."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=child_env(threads), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != expected:
        raise RuntimeError(f"{cmd}: exit {proc.returncode}, expected {expected}:\n{proc.stderr}")
    return seconds, proc.stderr


def export_checkout(ref: str, into: Path) -> Path:
    """`ref`'s scripts, configs and src/ unpacked from git: its scripts/train.py imports its own
    src/ (scripts put their checkout's src/ first), so the baseline side runs the baseline's code."""
    archive = subprocess.run(
        ["git", "archive", ref, "src", "scripts", "conf"], cwd=REPO, check=True, capture_output=True
    ).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def mistake_cmd(root: Path, name: str, tmp: Path, *options: str) -> list[str]:
    overrides = [o.format(tmp=tmp) for o in MISTAKES[name]]
    script = str(root / "scripts" / "train.py")
    return [sys.executable, *options, script, *overrides, f"hydra.run.dir={tmp}/run"]


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
STEP0 = {"default": [], "lm_accum": ["experiment=lm_accum"]}
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
    sides = {name: (lambda o=o: step0_seconds(o, threads)) for name, o in STEP0.items()}
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
            checkouts["before_"] = export_checkout(baseline, tmp / "baseline")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5, help="trainer.max_epochs (make train: 20)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--import-reps", type=int, default=2)
    parser.add_argument("--error-reps", type=int, default=5, help="repetitions of each mistake")
    parser.add_argument(
        "--errors-only", action="store_true", help="only the mistakes (no training run)"
    )
    parser.add_argument(
        "--baseline", default=None, help="git ref whose mistakes are timed beside this checkout's"
    )
    args = parse_args(parser, argv, TITLE)
    figures: dict[str, float | int | str] = {}
    measure_mistakes(args.error_reps, args.threads, args.baseline, figures)
    measure_step0(args.error_reps, args.threads, figures)
    mistakes = dict(figures)
    if args.errors_only:
        final_line(**mistakes)
        return 0
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
        **mistakes,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
