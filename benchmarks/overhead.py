"""P1: wall time of trainwell (default callbacks, guards, csv logger) over a hand-written loop.

    .venv/bin/python benchmarks/overhead.py                      # digits + resnet18, 3 reps
    .venv/bin/python benchmarks/overhead.py --workload digits --epochs 5 --reps 5

Apples to apples: both sides get the same seed before the same model init, the same datamodule's
train loader (same tensors, same order), the same optimizer and scheduler from the config, the
same precision and accumulation, one validation pass per epoch (trainwell's ModelCheckpoint
and EarlyStopping monitor val/acc, so "no validation" is not what a user runs), and the same
checkpoint policy: last.ckpt after every epoch, best.ckpt when val accuracy improved, atomic
(temp + fsync + rename), written from a snapshot by a background thread on both sides
(`--raw-ckpt sync` makes the raw loop write inline, `none` not at all). The trainwell side is
`trainwell.training.run.train` itself (test=false), timed from its Trainer's setup hook to
on_fit_end (after the last checkpoint write finished), so its sanity check and logging count.
Final losses and weights must agree to 1e-5 (CPU fp32 is deterministic), which proves both sides
did the same arithmetic.

Figures (median of interleaved repetitions, with spread = half-range / median):
  ratio            fit wall time / raw wall time (the issue's figure; <= 1.03 is the target)
  cpu_ratio        the same in process CPU seconds (robust when neighbours load the machine,
                   blind to I/O waits such as checkpoint fsync)
  epoch_ratio      steady-state epoch (2nd epoch on, checkpoints included), wall; epoch_cpu_ratio
                   the same in CPU
  fixed_ms         per-epoch fixed cost, each side: epoch - training batches - validation
                   batches, i.e. validation set-up + checkpoint + epoch-end work (ms, median
                   of steady-state epochs); ckpt_ms and val_setup_ms are its two named parts
  maxdiff          largest |difference| of final train/val loss and weights (must be <= 1e-5)
Last line: `digits_ratio=.. digits_cpu_ratio=.. ... resnet18_ratio=.. ...`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import fit_timer
import raw_loop
from harness import (
    add_common_args,
    describe,
    final_line,
    fixed_costs,
    header,
    set_threads,
    summary,
)

WORKLOADS = {
    "digits": [],  # the default experiment: digits + DigitsCNN, AdamW, warmup-cosine
    # experiment=resnet_accum (SGD nesterov, micro-batch x K=4) on small synthetic data
    "resnet18": [
        "experiment=resnet_accum",
        "data=synthetic",
        "data.num_samples=384",
        "data.num_val=128",
        "data.num_test=64",
        "data.batch_size=32",
        "model.net.width=16",
    ],
}
TOLERANCE = 1e-5


def agreement(a: dict, b: dict) -> float:
    """Largest absolute difference in final losses and weights between the two sides."""
    diffs = [abs(a["train_loss"] - b["train_loss"]), abs(a["val_loss"] - b["val_loss"])]
    for key, value in a["net_state"].items():
        other = b["net_state"][key]
        if value.is_floating_point():
            diffs.append((value.float() - other.float()).abs().max().item())
    return max(diffs)


def steady(epochs: list[float]) -> float:
    """Median epoch time after the first (the first pays one-off costs on both sides)."""
    return statistics.median(epochs[1:] if len(epochs) > 1 else epochs)


def measure(
    name: str, epochs: int, reps: int, tw_extra: list[str], raw_ckpt: str = "background"
) -> dict[str, float]:
    overrides = WORKLOADS[name]
    keys = ("ratio", "cpu_ratio", "epoch_ratio", "epoch_cpu_ratio", "raw", "tw", "diff")
    rows: dict[str, list[float]] = {k: [] for k in keys}
    costs: dict[str, list[float]] = {}
    for rep in range(reps):
        with tempfile.TemporaryDirectory(prefix="tw-bench-") as tmp:
            # Interleaved A/B, alternating which side goes first, so drift in machine load
            # (other jobs, thermal state) hits both sides alike.
            def run_raw(tmp: str = tmp) -> dict:
                return raw_loop.run_from_config(overrides, epochs, Path(tmp), ckpt=raw_ckpt)

            def run_tw(tmp: str = tmp) -> dict:
                return fit_timer.run_trainwell([*overrides, *tw_extra], epochs, Path(tmp))

            if rep % 2 == 0:
                raw, tw = run_raw(), run_tw()
            else:
                tw, raw = run_tw(), run_raw()
        for side, run in (("tw", tw), ("raw", raw)):
            for key, value in fixed_costs(run).items():
                costs.setdefault(f"{side}_{key}", []).append(value)
        rows["ratio"].append(tw["fit_seconds"] / raw["fit_seconds"])
        rows["cpu_ratio"].append(tw["fit_cpu"] / raw["fit_cpu"])
        rows["epoch_ratio"].append(steady(tw["epoch_seconds"]) / steady(raw["epoch_seconds"]))
        rows["epoch_cpu_ratio"].append(steady(tw["epoch_cpu"]) / steady(raw["epoch_cpu"]))
        rows["raw"].append(raw["fit_seconds"] / epochs)
        rows["tw"].append(tw["fit_seconds"] / epochs)
        rows["diff"].append(agreement(tw, raw))
        print(
            f"[{name} rep {rep}] wall: raw {raw['fit_seconds']:.3f}s trainwell fit "
            f"{tw['fit_seconds']:.3f}s (whole train() {tw['train_wall']:.3f}s); cpu: raw "
            f"{raw['fit_cpu']:.3f}s trainwell {tw['fit_cpu']:.3f}s; ratio {rows['ratio'][-1]:.3f} "
            f"cpu_ratio {rows['cpu_ratio'][-1]:.3f} max|diff| {rows['diff'][-1]:.2e}",
            flush=True,
        )
    print(describe(f"{name} raw loop s/epoch (train + val)", rows["raw"], "s"))
    print(
        describe(f"{name} trainwell s/epoch (fit incl. sanity check, val, ckpt)", rows["tw"], "s")
    )
    print(describe(f"{name} ratio: fit wall / raw wall", rows["ratio"]))
    print(describe(f"{name} cpu_ratio: fit CPU / raw CPU", rows["cpu_ratio"]))
    print(describe(f"{name} epoch_ratio: steady-state epoch wall", rows["epoch_ratio"]))
    print(describe(f"{name} epoch_cpu_ratio: steady-state epoch CPU", rows["epoch_cpu_ratio"]))
    for key, values in sorted(costs.items()):
        side, cost = key.split("_", 1)
        label = "trainwell" if side == "tw" else "raw loop"
        print(describe(f"{name} {label} per-epoch {cost}", values, " ms"))
    worst = max(rows["diff"])
    print(f"{name} max |final loss / weight difference| = {worst:.2e} (tolerance {TOLERANCE})")
    if worst > TOLERANCE:
        print(f"{name}: WARNING the two sides disagree beyond {TOLERANCE}: not apples to apples")
    figures = {f"{name}_s_per_epoch_raw": statistics.median(rows["raw"])}
    for key in ("ratio", "cpu_ratio", "epoch_ratio", "epoch_cpu_ratio"):
        s = summary(rows[key])
        figures[f"{name}_{key}"] = s["median"]
        figures[f"{name}_{key}_spread"] = s["spread"]
    figures[f"{name}_maxdiff"] = worst
    for key, values in costs.items():
        figures[f"{name}_{key}"] = statistics.median(values)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=[*WORKLOADS, "all"], default="all")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--raw-ckpt",
        choices=["background", "sync", "none"],
        default="background",
        help="how the raw loop writes its per-epoch checkpoints (trainwell: background)",
    )
    parser.add_argument(
        "--tw-override",
        action="append",
        default=[],
        help="extra Hydra override for the trainwell side only, to find what costs time "
        "(e.g. --tw-override=~callbacks.rich_progress_bar); repeatable",
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    header("P1 overhead: trainwell vs a hand-written loop (CPU fp32)")
    names = list(WORKLOADS) if args.workload == "all" else [args.workload]
    figures: dict[str, float] = {}
    for name in names:
        figures.update(measure(name, args.epochs, args.reps, args.tw_override, args.raw_ckpt))
    final_line(**figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
