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

import harness
import loops

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
) -> dict[str, float | int | str]:
    overrides = WORKLOADS[name]

    def run_raw() -> dict:
        with tempfile.TemporaryDirectory(prefix="tw-bench-") as tmp:
            return loops.run_raw(overrides, epochs, Path(tmp), ckpt=raw_ckpt)

    def run_tw() -> dict:
        with tempfile.TemporaryDirectory(prefix="tw-bench-") as tmp:
            return loops.run_trainwell([*overrides, *tw_extra], epochs, Path(tmp))

    def report(rep: int, runs: dict[str, dict]) -> None:
        raw, tw = runs["raw"], runs["tw"]
        print(
            f"[{name} rep {rep}] wall: raw {raw['fit_seconds']:.3f}s trainwell fit "
            f"{tw['fit_seconds']:.3f}s (whole train() {tw['train_wall']:.3f}s); cpu: raw "
            f"{raw['fit_cpu']:.3f}s trainwell {tw['fit_cpu']:.3f}s; ratio "
            f"{tw['fit_seconds'] / raw['fit_seconds']:.3f} cpu_ratio "
            f"{tw['fit_cpu'] / raw['fit_cpu']:.3f} max|diff| {agreement(tw, raw):.2e}",
            flush=True,
        )

    runs = harness.interleaved({"raw": run_raw, "tw": run_tw}, reps, report)
    pairs = list(zip(runs["raw"], runs["tw"], strict=True))
    figures: dict[str, float | int | str] = {}
    raw_s = [raw["fit_seconds"] / epochs for raw, _ in pairs]
    tw_s = [tw["fit_seconds"] / epochs for _, tw in pairs]
    label = f"{name} raw loop s/epoch (train + val)"
    harness.figure(figures, f"{name}_s_per_epoch_raw", raw_s, label, "s")
    print(
        harness.describe(f"{name} trainwell s/epoch (fit incl. sanity check, val, ckpt)", tw_s, "s")
    )
    ratios = {
        "ratio: fit wall / raw wall": [tw["fit_seconds"] / raw["fit_seconds"] for raw, tw in pairs],
        "cpu_ratio: fit CPU / raw CPU": [tw["fit_cpu"] / raw["fit_cpu"] for raw, tw in pairs],
        "epoch_ratio: steady-state epoch wall": [
            steady(tw["epoch_seconds"]) / steady(raw["epoch_seconds"]) for raw, tw in pairs
        ],
        "epoch_cpu_ratio: steady-state epoch CPU": [
            steady(tw["epoch_cpu"]) / steady(raw["epoch_cpu"]) for raw, tw in pairs
        ],
    }
    for label, values in ratios.items():
        key = label.split(":")[0]
        harness.figure(figures, f"{name}_{key}", values, f"{name} {label}", spread=True)
    for side, label in (("tw", "trainwell"), ("raw", "raw loop")):
        costs = [harness.fixed_costs(run) for run in runs[side]]
        for cost in costs[0]:
            values = [c[cost] for c in costs]
            harness.figure(
                figures, f"{name}_{side}_{cost}", values, f"{name} {label} per-epoch {cost}", " ms"
            )
    worst = max(agreement(tw, raw) for raw, tw in pairs)
    print(f"{name} max |final loss / weight difference| = {worst:.2e} (tolerance {TOLERANCE})")
    if worst > TOLERANCE:
        print(f"{name}: WARNING the two sides disagree beyond {TOLERANCE}: not apples to apples")
    figures[f"{name}_maxdiff"] = worst
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
    args = harness.parse_args(
        parser, argv, "P1 overhead: trainwell vs a hand-written loop (CPU fp32)"
    )
    names = list(WORKLOADS) if args.workload == "all" else [args.workload]
    figures: dict[str, float | int | str] = {}
    for name in names:
        figures.update(measure(name, args.epochs, args.reps, args.tw_override, args.raw_ckpt))
    harness.final_line(**figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
