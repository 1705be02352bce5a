"""Per-epoch fixed cost with the H100 run's state: checkpoint and validation set-up, trainwell vs
bare Lightning vs the hand-written loop (CPU).

    .venv/bin/python benchmarks/epoch_cost.py                 # ResNet-18 width 64, 3 reps, ~3 min
    .venv/bin/python benchmarks/epoch_cost.py --width 4 --reps 1 --epochs 3   # smoke

The state is the H100 throughput run's: ResNet-18 at width 64 (11.2 M parameters) with SGD's
momentum buffers, ~90 MB. The epochs are short (6 steps of 8 CIFAR-shaped images, 2 validation
batches) so that what happens once per epoch is a large, measurable share. The three sides are
benchmarks/gpu_throughput.py's, on the CPU, interleaved in one process, on the same data path,
model, optimizer and schedule, each validating and checkpointing once per epoch with the same
policy (last.ckpt every epoch, best.ckpt when val/acc improved):

  tw    `train()` with every default; its checkpoints are written by a background thread
  bare  bare Lightning (benchmarks/loops.py): Lightning's ModelCheckpoint and IO
  raw   the hand-written loop: each file from its own snapshot (clone), written by a thread

Figures (medians of the steady epochs; ratios per repetition, then the median):
  <side>_ckpt_ms        training-thread time in the epoch's checkpoint saves
  <side>_val_setup_ms   the validation pass minus its batches
  <side>_*_cpu_ms       the same two in the training thread's CPU time (robust when neighbours
                        load the machine; blind to waits: a pending write, the GIL, I/O)
  ckpt_val_ratio        tw (ckpt + val set-up) / raw (the target: <= 1.2); ckpt_ratio and
                        val_setup_ratio each part alone; bare_* the same for bare Lightning
  tw_vs_bare_ckpt_val   tw (ckpt + val set-up) / bare (ours against Lightning's)
  *_cpu_ratio, tw_vs_bare_ckpt_val_cpu   the same ratios on the CPU clock
  <side>_after_ckpt     the first step after the epoch's checkpoints / a steady step: a
                        background write must not hold the next step (~1.0)
  <side>_maxdiff        largest |final weight difference| against raw: 0 when the sides did
                        the same arithmetic
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import gpu_throughput
import harness


def workload(args: argparse.Namespace) -> list[str]:
    return [
        *("--num-samples", str(args.steps * 8), "--num-val", "16", "--batch", "8"),
        *("--width", str(args.width), "--modes", "fp32", "--epochs", str(args.epochs)),
        *("--reps", str(args.reps), "--out", tempfile.mkdtemp(prefix="tw-epoch-cost-")),
        *("--data", "cpu"),  # the DataLoader path: what a CPU user runs
    ]


def state_size(width: int) -> tuple[int, float]:
    """(parameters, MB of weights + buffers + one momentum buffer per parameter) of the net."""
    from project.models.resnet import ResNet18

    net = ResNet18(width=width)
    params = sum(p.numel() * p.element_size() for p in net.parameters())
    buffers = sum(b.numel() * b.element_size() for b in net.buffers())
    return sum(p.numel() for p in net.parameters()), (2 * params + buffers) / 1e6


def per_rep(row: dict[str, list[float]], num: str, den: str) -> list[float]:
    """(num / den) per repetition; `num` and `den` are `+`-joined figure names."""

    def total(names: str, rep: int) -> float:
        return sum(row[name][rep] for name in names.split("+"))

    return [total(num, rep) / total(den, rep) for rep in range(len(row["tw_ckpt_ms"]))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=64, help="64: the H100 run's 11.2 M params")
    parser.add_argument("--steps", type=int, default=6, help="training steps per epoch")
    parser.add_argument("--epochs", type=int, default=4, help="the first is warm-up")
    parser.add_argument("--reps", type=int, default=3)
    args = harness.parse_args(parser, argv, "per-epoch fixed cost (CPU, the H100 run's state)")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    inner = gpu_throughput.parser(cuda=False).parse_args(workload(args))
    row = gpu_throughput.measure(inner)["fp32"]["samples"]
    figures: dict[str, float | int | str] = {}
    for side in gpu_throughput.SIDES:
        parts = ("ckpt_ms", "val_setup_ms", "ckpt_cpu_ms", "val_setup_cpu_ms", "fixed_ms")
        for part in (*parts, "step_ms", "after_ckpt"):
            key = f"{side}_{part}"
            harness.figure(figures, key, row[key], f"{side} {part}")
    ratios = {
        "ckpt_val_ratio": ("tw_ckpt_ms+tw_val_setup_ms", "raw_ckpt_ms+raw_val_setup_ms"),
        "ckpt_ratio": ("tw_ckpt_ms", "raw_ckpt_ms"),
        "val_setup_ratio": ("tw_val_setup_ms", "raw_val_setup_ms"),
        "bare_ckpt_val_ratio": ("bare_ckpt_ms+bare_val_setup_ms", "raw_ckpt_ms+raw_val_setup_ms"),
        "tw_vs_bare_ckpt_val": ("tw_ckpt_ms+tw_val_setup_ms", "bare_ckpt_ms+bare_val_setup_ms"),
    }
    for name, (num, den) in list(ratios.items()):  # the same on the training thread's CPU clock
        cpu = name.replace("_ratio", "_cpu_ratio") if "ratio" in name else f"{name}_cpu"
        ratios[cpu] = (num.replace("_ms", "_cpu_ms"), den.replace("_ms", "_cpu_ms"))
    for name, (num, den) in ratios.items():
        harness.figure(
            figures, name, per_rep(row, num, den), f"{name} ({num} / {den})", spread=True
        )
    for side in ("tw", "bare"):
        worst = max(row[f"{side}_maxdiff"])
        figures[f"{side}_maxdiff"] = worst
        print(f"{side} vs raw: max |final weight difference| {worst:.2e} (fp32 CPU: 0 expected)")
    params, megabytes = state_size(args.width)
    print(f"state: {params / 1e6:.1f} M parameters, {megabytes:.0f} MB with buffers and momentum")
    figures["state_mb"] = megabytes
    harness.final_line(**figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
