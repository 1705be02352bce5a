"""What saving numpy state costs a run, and what the step-0 checkpoint check costs the default run.

    .venv/bin/python benchmarks/state_checkpoint.py                # default digits runs, 3 reps
    .venv/bin/python benchmarks/state_checkpoint.py --epochs 1 --reps 1

Four sides, each a full `training.run.train` of the default digits run (the config
`python scripts/train.py` composes; progress bar and config print off) timed from the call to
results.json, interleaved so the machine's load hits every side alike:

* `default`: the run as shipped (its datamodule keeps two Python floats);
* `no_step0`: the same run with the step-0 check (callbacks/checkpoint_rehearsal.py) replaced by
  a no-op: the whole-run cost of the check, within the runs' noise;
* `lists` / `numpy`: digits with a datamodule that also fits per-pixel statistics on the training
  split and keeps them as Python lists and floats, or as numpy arrays and scalars (the same
  values, the same work): what saving (and, at testing, reading back) numpy state costs.

The step-0 check is also timed inside every run (the seconds spent in it), and its share of the
default run is that time over the run's wall time: the figure that must stay under 2%.

Last line: `default_s=.. no_step0_s=.. lists_s=.. numpy_s=.. numpy_over_lists=..
step0_s=.. step0_share=.. default_over_no_step0=..`
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import compose, final_line, interleaved, parse_args, summary

QUIET = [
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
]
STATEFUL = "state_datamodules"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=None, help="default: the config's")
    parser.add_argument("--reps", type=int, default=3)
    args = parse_args(parser, argv, "state checkpoint: digits, numpy vs lists, step-0 share")

    from trainwell.callbacks import checkpoint_rehearsal
    from trainwell.io.checkpoint_write import Rehearsal
    from trainwell.training.run import train

    overrides = list(QUIET)
    if args.epochs is not None:
        overrides.append(f"trainer.max_epochs={args.epochs}")
    root = Path(tempfile.mkdtemp(prefix="state_checkpoint-"))
    real = checkpoint_rehearsal.rehearse
    spent: list[float] = []

    def timed_rehearse(trainer: Any, datamodule: Any = None) -> Rehearsal:
        start = time.perf_counter()
        outcome = real(trainer, datamodule)
        spent.append(time.perf_counter() - start)
        return outcome

    def skipped(trainer: Any, datamodule: Any = None) -> Rehearsal:
        return Rehearsal()  # passed, having saved and read nothing

    def side(name: str, extra: list[str], rehearse: Any) -> Any:
        def run() -> tuple[float, float]:
            run_dir = root / name
            shutil.rmtree(run_dir, ignore_errors=True)
            cfg = compose([*overrides, *extra], run_dir)
            checkpoint_rehearsal.rehearse = rehearse
            spent.clear()
            try:
                start = time.perf_counter()
                train(cfg)
                wall = time.perf_counter() - start
            finally:
                checkpoint_rehearsal.rehearse = real
            assert (run_dir / "results.json").is_file()
            return wall, sum(spent)

        return run

    sides = {
        "default": side("default", [], timed_rehearse),
        "no_step0": side("no_step0", [], skipped),
        "lists": side("lists", [f"data._target_={STATEFUL}.ListStatsDigits"], timed_rehearse),
        "numpy": side("numpy", [f"data._target_={STATEFUL}.NumpyStatsDigits"], timed_rehearse),
    }
    try:
        for run in sides.values():  # warm-up: imports, first-call costs
            run()
        times = interleaved(sides, args.reps)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    wall = {name: summary([w for w, _ in runs])["median"] for name, runs in times.items()}
    step0 = summary([s for _, s in times["default"]])["median"]
    share = summary([s / w for w, s in times["default"]])["median"]
    for name, runs in times.items():
        s = summary([w for w, _ in runs])
        print(f"{name:9s} to results.json: {s['median']:.2f} s (spread {s['spread']:.1%})")
    print(f"numpy / lists: {wall['numpy'] / wall['lists']:.3f}")
    print(f"step-0 check in the default run: {1000 * step0:.1f} ms, {share:.3%} of the run")
    print(f"default / no step-0 check: {wall['default'] / wall['no_step0']:.3f} (run-to-run noise)")
    final_line(
        default_s=wall["default"],
        no_step0_s=wall["no_step0"],
        lists_s=wall["lists"],
        numpy_s=wall["numpy"],
        numpy_over_lists=wall["numpy"] / wall["lists"],
        step0_s=step0,
        step0_share=share,
        default_over_no_step0=wall["default"] / wall["no_step0"],
    )


if __name__ == "__main__":
    main()
