"""Wall-time overhead of the training guards (trainwell.callbacks) on the default experiment.

    .venv/bin/python benchmarks/guard_overhead.py                 # 5 epochs, 3 interleaved reps
    .venv/bin/python benchmarks/guard_overhead.py --epochs 20 --reps 5

Each repetition runs `trainwell.training.run.train` twice, guards on and off (the order
alternates between repetitions), with everything else identical: same config, seed and data.
"Off" removes the three guard callbacks (`callbacks.<guard>=null`). Timed: the whole train()
call with test=false.

On a shared machine the wall difference is noisy, so a second figure is measured directly: one
more guarded run under Lightning's SimpleProfiler, summing the time spent inside the guards'
hooks as a share of the fit (`guard_hook_share`).

Last line: `guard_overhead=<median(on)/median(off) - 1> guard_hook_share=<fraction>
guards_on_s=.. guards_off_s=..`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import harness

GUARDS = ("non_finite_guard", "grad_norm_monitor", "train_mode_guard")
GUARD_CLASSES = ("NonFiniteGuard", "GradNormLogger", "TrainModeGuard")


def run_once(guards: bool, epochs: int, out: Path, profile: bool = False) -> float:
    """Wall seconds of one train() call (test=false) writing into `out`."""
    from trainwell.training.run import train

    overrides = [f"trainer.max_epochs={epochs}", "test=false", "print_config=false"]
    overrides += [] if guards else [f"callbacks.{g}=null" for g in GUARDS]
    if profile:
        overrides.append(
            "+trainer.profiler={_target_: lightning.pytorch.profilers.SimpleProfiler, "
            f"dirpath: {out}, filename: profile}}"
        )
    wall, _, _ = harness.timed(lambda: train(harness.compose(overrides, out)))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    args = harness.parse_args(parser, argv, "guard overhead: default experiment, guards on vs off")
    with tempfile.TemporaryDirectory(prefix="tw-bench-guards-") as tmp:

        def side(guards: bool) -> float:
            return run_once(guards, args.epochs, Path(tempfile.mkdtemp(dir=tmp)))

        def report(rep: int, results: dict[str, float]) -> None:
            line = ", ".join(f"guards {k}: {v:.2f} s" for k, v in results.items())
            print(f"rep {rep}: {line}", flush=True)

        times = harness.interleaved(
            {"on": lambda: side(True), "off": lambda: side(False)}, args.reps, report
        )
        run_once(True, args.epochs, Path(tmp) / "profiled", profile=True)
        share = hook_share(Path(tmp) / "profiled" / "fit-profile.txt")
    figures: dict[str, float | int | str] = {}
    on = harness.figure(figures, "guards_on_s", times["on"], "train() with guards", " s")
    off = harness.figure(figures, "guards_off_s", times["off"], "train() without guards", " s")
    print(f"time inside the guards' hooks (SimpleProfiler): {100 * share:.2f}% of the fit")
    harness.final_line(guard_overhead=on / off - 1, guard_hook_share=share, **figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
