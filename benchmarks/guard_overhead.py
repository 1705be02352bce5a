"""Wall-time overhead of the training guards (trainwell.callbacks) on the default experiment.

    .venv/bin/python benchmarks/guard_overhead.py                 # 5 epochs, 3 interleaved reps
    .venv/bin/python benchmarks/guard_overhead.py --epochs 20 --reps 5

Each repetition runs `trainwell.training.run.train` twice, guards on then off (the order
alternates between repetitions), with everything else identical: same config, seed and data.
"Off" removes the three guard callbacks (`callbacks.<guard>=null`). Timed: the whole train()
call with test=false.

On a shared machine the wall difference is noisy, so a second figure is measured directly: one
more guarded run under Lightning's SimpleProfiler, summing the time spent inside the guards'
hooks as a share of the fit (`guard_hook_share`).

Last lines: `guard_overhead=<median(on)/median(off) - 1>` and `guard_hook_share=<fraction>`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

import trainwell.resolvers  # noqa: F401
from trainwell.training.run import train

CONF = Path(__file__).resolve().parents[1] / "conf"
GUARDS = ("non_finite_guard", "grad_norm_monitor", "train_mode_guard")


def run_once(guards: bool, epochs: int, out: Path, profile: bool = False) -> float:
    overrides = [f"trainer.max_epochs={epochs}", "test=false", "print_config=false"]
    overrides += [] if guards else [f"callbacks.{g}=null" for g in GUARDS]
    if profile:
        overrides.append(
            "+trainer.profiler={_target_: lightning.pytorch.profilers.SimpleProfiler, "
            f"dirpath: {out}, filename: profile}}"
        )
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    with open_dict(cfg):
        cfg.paths.root_dir = str(CONF.parent)
        cfg.paths.output_dir = str(out)
    start = time.perf_counter()
    train(cfg)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            order = (True, False) if rep % 2 == 0 else (False, True)
            for guards in order:
                wall = run_once(guards, args.epochs, Path(tmp) / f"r{rep}-{guards}")
                times[guards].append(wall)
                print(f"rep {rep} guards={'on' if guards else 'off'}: {wall:.2f} s", flush=True)
        run_once(True, args.epochs, Path(tmp) / "profiled", profile=True)
        share = hook_share(Path(tmp) / "profiled" / "fit-profile.txt")
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"median on {on:.2f} s, off {off:.2f} s over {args.reps} reps, {args.epochs} epochs")
    print(f"guard_overhead={on / off - 1:+.4f}")
    print(f"guard_hook_share={share:.4f}")


def hook_share(report: Path) -> float:
    """Time inside guard hooks / total profiled time, from SimpleProfiler's report table."""
    names = ("NonFiniteGuard", "GradNormLogger", "TrainModeGuard")
    total, guards = 0.0, 0.0
    for line in report.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4:
            continue
        if cells[0] == "Total":
            total = float(cells[3])
        elif cells[0].startswith("[Callback]") and any(n in cells[0] for n in names):
            guards += float(cells[3])
    return guards / total if total else float("nan")


if __name__ == "__main__":
    main()
