"""P2: ResNet-18 training throughput: trainwell, bare Lightning and the hand-written loop, same work.

    .venv/bin/python benchmarks/gpu_throughput.py                      # on a GPU box
    .venv/bin/python benchmarks/gpu_throughput.py --num-samples 256 --num-val 64 --batch 32 \\
        --width 8 --modes fp32 --epochs 2                             # tiny CPU smoke run
    .venv/bin/python benchmarks/gpu_throughput.py --ops --num-samples 64 --num-val 16 --batch 8 \\
        --modes fp32 bf16 bf16_cl bf16_cl_compile                     # op parity (CPU profiler)

Three sides, interleaved in one process (the order rotates between repetitions), run
`model=resnet18 data=synthetic` (CIFAR-shaped) through the SAME data path: by default the
on-device pipeline (`data.on_device=true data.augment=true`: uint8 on the GPU, crop + flip +
normalise per batch there), `--data cpu` for the DataLoader path. All validate once per epoch
and checkpoint every epoch with the same policy (last.ckpt every epoch, best.ckpt when val
accuracy improved):
  tw    `train()` itself with its default callbacks and CSV logger (atomic background writes)
  bare  Lightning's Trainer with none of trainwell's callbacks, task or checkpoint IO
        (benchmarks/loops.py: Lightning's ModelCheckpoint, its own IO, CSV logger)
  raw   the hand-written loop (benchmarks/loops.py: atomic writes in a background thread;
        `--raw-ckpt sync` for an inline-writing raw loop)
raw -> bare is Lightning's share of the gap, bare -> tw ours; `--sides` runs a subset.

Modes:
  fp32             trainer.precision=32-true (TF32 matmuls: trainwell sets matmul precision high)
  bf16             trainer.precision=bf16-mixed
  bf16_cl          bf16 + channels_last: NHWC batches (data.channels_last) and an NHWC model
  bf16_cl_compile  + model.compile=true (torch.compile of the net, in place)

Figures per mode and side (medians over repetitions; ratios per repetition, then the median):
  img/s     training images / training seconds of the epochs after the first (the first pays
            compile, cudnn autotune, allocator warm-up); validation and checkpoints excluded
  ratio     tw img/s / raw img/s (target >= 0.97); bare_ratio = bare / raw (Lightning's share),
            tw_vs_bare = tw / bare (ours; target >= 1.0)
  step_ms   median training step (batch start to the next, harness.StepClock: CUDA events)
  mfu       img/s x FLOPs per image (FlopCounterMode, forward + backward) / the device's dense
            peak for the mode's compute dtype (Lightning's get_available_flops: TF32 for fp32,
            bf16 otherwise); mfu_bf16 divides by the bf16 peak in every mode
  logged    what trainwell's ThroughputLogger logged (median over the last epoch): img/s, MFU
  peak_mib  torch.cuda.max_memory_allocated over the run
  ckpt_ms / val_setup_ms / fixed_ms   per-epoch fixed costs (see harness.fixed_costs); other_ms
            = fixed - ckpt - val set-up: epoch-end hooks and logging
  after_ckpt   the first step after an epoch's checkpoints / a steady step (background writes
            must not hold the next step: ~1.0; harness.after_checkpoint)

`--ops` (op parity, on any machine): instead of timing, one steady training step of each side
(batch 3 of the first epoch, from its on_train_batch_start to the next one's) runs under the torch
profiler on the CPU, with trainwell's GPU code paths (cadence.host_reads_are_free answers no, as
in benchmarks/sync_probe.py). Counted: the aten operations called from Python or by a backward
node (not the ones inside them), without views and conversions that copied nothing (no kernel).
Printed per mode: every operation whose count differs from the raw loop's, copies first, with
trainwell's and bare Lightning's counts and the origin of trainwell's extra calls (the innermost
frame outside torch, or the backward node). Last line: `<mode>_<side>_extra_ops=..` (operations
beyond the raw loop's) and `<mode>_<side>_extra_copies=..`. On a CPU, compile needs a C++
toolchain and minutes; where it fails the mode says so and the others go on.

On a machine without CUDA it runs the same code on the CPU and says so (the smoke test).
Writes gpu_throughput.json and a table to --out or $OUT when set. Last line: key=value figures.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import harness
import lightning as L
import loops
import torch

if __name__ == "__main__":
    # Hydra builds `gpu_throughput.OpWindow` by import: make that name this very module (--ops).
    sys.modules.setdefault("gpu_throughput", sys.modules["__main__"])

# Dense (no sparsity) bf16 tensor-core peak, TFLOP/s, from the vendors' datasheets.
BF16_PEAK_TFLOPS = {
    "H200": 989.0,
    "H100 SXM": 989.0,
    "H100 80GB HBM3": 989.0,
    "H100 NVL": 835.0,
    "H100 PCIe": 756.0,
    "H100": 756.0,  # unknown H100 variant: the conservative (PCIe) figure
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10G": 70.0,
    "RTX 4090": 165.0,
}

# mode -> (overrides, model in channels_last, compute dtype)
MODES: dict[str, tuple[list[str], bool, torch.dtype]] = {
    "fp32": (["trainer.precision=32-true", "data.channels_last=false"], False, torch.float32),
    "bf16": (["trainer.precision=bf16-mixed", "data.channels_last=false"], False, torch.bfloat16),
    "bf16_cl": (["trainer.precision=bf16-mixed", "data.channels_last=true"], True, torch.bfloat16),
    "bf16_cl_compile": (
        ["trainer.precision=bf16-mixed", "data.channels_last=true", "model.compile=true"],
        True,
        torch.bfloat16,
    ),
}


FINAL_KEYS = (
    "tw_img_s",
    "bare_img_s",
    "raw_img_s",
    "ratio",
    "bare_ratio",
    "tw_vs_bare",
    "mfu",
    "tw_peak_mib",
    "tw_step_ms",
    "bare_step_ms",
    "raw_step_ms",
    "tw_ckpt_ms",
    "bare_ckpt_ms",
    "raw_ckpt_ms",
    "tw_fixed_ms",
    "bare_fixed_ms",
    "raw_fixed_ms",
    "tw_after_ckpt",
    "bare_after_ckpt",
    "raw_after_ckpt",
    "tw_maxdiff",
    "bare_maxdiff",
)


def bf16_peak(name: str) -> float | None:
    for key in sorted(BF16_PEAK_TFLOPS, key=len, reverse=True):  # most specific match first
        if key.lower() in name.lower():
            return BF16_PEAK_TFLOPS[key] * 1e12
    return None


def dtype_peak(dtype: torch.dtype) -> float | None:
    """Lightning's dense peak for this device and compute dtype (None on a CPU)."""
    if not torch.cuda.is_available():
        return None
    from lightning.fabric.utilities.throughput import get_available_flops

    peak = get_available_flops(torch.device("cuda", torch.cuda.current_device()), dtype)
    return float(peak) if peak else None


def train_flops_per_image(width: int) -> float:
    """Forward + backward FLOPs of one 3x32x32 image through the configured ResNet-18."""
    from torch.utils.flop_counter import FlopCounterMode

    from project.models.resnet import ResNet18

    net = ResNet18(width=width)
    x = torch.randn(2, 3, 32, 32)
    with FlopCounterMode(display=False) as counter:
        net(x).sum().backward()
    return counter.get_total_flops() / 2


def images_per_second(run: dict) -> float:
    """Training images / training seconds of the epochs after the first."""
    seconds = run["train_seconds"][1:] or run["train_seconds"]
    return run["images_per_epoch"] * len(seconds) / sum(seconds)


def logged_figures(run_dir: Path) -> dict[str, float]:
    """The median of what ThroughputLogger logged in the last epoch (img/s, MFU)."""
    path = run_dir / "trainwell" / "csv" / "metrics.csv"
    if not path.is_file():
        return {}
    rows = [r for r in csv.DictReader(path.open()) if r.get("throughput/samples_per_sec")]
    if not rows:
        return {}
    epochs = [int(r["epoch"]) for r in rows if r.get("epoch")]
    if epochs:
        rows = [r for r in rows if r.get("epoch") and int(r["epoch"]) == max(epochs)]
    else:  # logged straight to the logger, without an epoch column: the later half
        rows = rows[len(rows) // 2 :]
    out = {"logged_img_s": statistics.median(float(r["throughput/samples_per_sec"]) for r in rows)}
    mfus = [float(r["throughput/mfu"]) for r in rows if r.get("throughput/mfu")]
    if mfus:
        out["logged_mfu"] = statistics.median(mfus)
    return out


def base_overrides(args: argparse.Namespace, cuda: bool) -> list[str]:
    data = ["data.on_device=true", "data.augment=true"] if args.data == "on_device" else []
    return [
        "model=resnet18",
        "data=synthetic",
        *data,
        f"data.num_samples={args.num_samples}",
        f"data.num_val={args.num_val}",
        f"data.batch_size={args.batch}",
        f"data.num_workers={args.num_workers}",
        f"model.net.width={args.width}",
        "model.scheduler=null",  # constant LR: no schedule maths on either side
        f"trainer={'gpu' if cuda else 'cpu'}",
        "trainer.num_sanity_val_steps=0",
    ]


def measure(
    args: argparse.Namespace,
    deadline: float | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every mode, each side in `args.sides`, interleaved; per-mode figures (medians) and the
    samples.

    `deadline` (time.perf_counter() value): repetitions not started by then are skipped;
    `progress` gets the samples so far after every repetition of a mode (a caller saves them,
    in case the process is stopped)."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    flops = train_flops_per_image(args.width)
    peak_bf16 = bf16_peak(torch.cuda.get_device_name(0)) if cuda else None
    samples: dict[str, dict[str, list[float]]] = {m: {} for m in args.modes}
    for rep in range(args.reps):
        for mode in args.modes:
            if deadline is not None and time.perf_counter() > deadline and rep > 0:
                print(f"[rep {rep} {mode}] skipped: time budget", flush=True)
                continue
            overrides, channels_last, _ = MODES[mode]
            overrides = [*base_overrides(args, cuda), *overrides]
            tw_overrides = list(overrides)
            if channels_last:
                tw_overrides.append("+callbacks.bench_cl._target_=loops.ChannelsLast")

            def run_tw(tw_overrides: list[str] = tw_overrides) -> dict:
                with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
                    if cuda:
                        torch.cuda.reset_peak_memory_stats()
                    out = loops.run_trainwell(
                        [*tw_overrides, *args.tw_override], args.epochs, Path(tmp)
                    )
                    out["images_per_epoch"] = args.num_samples
                    return {**out, **logged_figures(Path(tmp))}

            def run_raw(overrides: list[str] = overrides, cl: bool = channels_last) -> dict:
                with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
                    return loops.run_raw(
                        overrides, args.epochs, Path(tmp), device=device,
                        channels_last=cl, ckpt=args.raw_ckpt,
                    )  # fmt: skip

            def run_bare(overrides: list[str] = overrides, cl: bool = channels_last) -> dict:
                with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
                    out = loops.run_bare(
                        overrides, args.epochs, Path(tmp), device=device, channels_last=cl
                    )
                    out["images_per_epoch"] = args.num_samples
                    return out

            sides = {"tw": run_tw, "bare": run_bare, "raw": run_raw}
            runs = harness.rotated({k: v for k, v in sides.items() if k in args.sides}, rep)
            row = samples[mode]
            figures = side_figures(runs)
            for key, value in figures.items():
                row.setdefault(key, []).append(value)
            if progress is not None:
                progress({"samples": samples})
            print(f"[rep {rep} {mode}] " + progress_line(figures), flush=True)
    results: dict[str, dict[str, Any]] = {}
    for mode, row in samples.items():
        if not row:
            continue
        # Ratios per repetition (the sides of one repetition ran under the same load), then
        # the median; the sides' own figures are medians of their samples.
        med = {k: statistics.median(v) for k, v in row.items()}
        peak = dtype_peak(MODES[mode][2])
        med |= {
            "flops_per_image": flops,
            "peak_flops": peak or float("nan"),
            "reps": max(len(v) for v in row.values()),
        }
        for side in ("tw", "bare", "raw"):
            if f"{side}_img_s" in med:
                images = med[f"{side}_img_s"]
                med[f"{side}_mfu"] = images * flops / peak if peak else float("nan")
                med[f"{side}_mfu_bf16"] = images * flops / peak_bf16 if peak_bf16 else float("nan")
        if "tw_img_s" in row:
            tw = row["tw_img_s"]
            med["mfu"], med["mfu_bf16"] = med["tw_mfu"], med["tw_mfu_bf16"]
            med["tw_spread"] = (max(tw) - min(tw)) / 2 / med["tw_img_s"]
        if "ratio" in row:
            med["ratio_min"] = min(row["ratio"])
        results[mode] = {"median": med, "samples": row}
    return results


SIDES = ("tw", "bare", "raw")
# (figure, numerator side, denominator side): the gap and its two shares, in img/s
RATIOS = (
    ("ratio", "tw", "raw"),  # the whole gap (target >= 0.97)
    ("bare_ratio", "bare", "raw"),  # Lightning's share: its loop, checkpoint IO, logging
    ("tw_vs_bare", "tw", "bare"),  # ours: the task, callbacks and checkpoint IO (target >= 1.0)
)


def side_figures(runs: dict[str, dict]) -> dict[str, float]:
    """One repetition's figures: per side, and the ratios between the sides that ran."""
    figures: dict[str, float] = {}
    for side, run in runs.items():
        steps = [s for epoch in run["step_seconds"][1:] for s in epoch] or [float("nan")]
        costs = harness.fixed_costs(run)
        figures |= {
            f"{side}_img_s": images_per_second(run),
            f"{side}_peak_mib": run["peak_memory"] / 2**20,
            f"{side}_step_ms": 1000 * statistics.median(steps),
            f"{side}_after_ckpt": harness.after_checkpoint(run["step_seconds"]),
            **{f"{side}_{k}": v for k, v in costs.items()},
            # The epoch's fixed cost besides the two named parts: epoch-end hooks and logging.
            f"{side}_other_ms": costs["fixed_ms"] - costs["ckpt_ms"] - costs["val_setup_ms"],
            **{f"{side}_{k}": v for k, v in run.items() if k.startswith("logged_")},
        }
    for name, num, den in RATIOS:
        if num in runs and den in runs:
            figures[name] = figures[f"{num}_img_s"] / figures[f"{den}_img_s"]
    for side in ("tw", "bare"):
        if side in runs and "raw" in runs:
            # Same init, data order, optimizer and schedule: the same final weights (exactly in
            # fp32 on a CPU): every side did the same work.
            figures[f"{side}_maxdiff"] = weight_difference(runs[side], runs["raw"])
    return figures


def weight_difference(a: dict, b: dict) -> float:
    """Largest |difference| between the two runs' final floating-point weights."""
    diffs = [0.0]
    for key, value in a["net_state"].items():
        if value.is_floating_point():
            other = b["net_state"][key].to(value.device)
            diffs.append((value.float() - other.float()).abs().max().item())
    return max(diffs)


def progress_line(figures: dict[str, float]) -> str:
    sides = [s for s in SIDES if f"{s}_img_s" in figures]
    return (
        " / ".join(sides) + ": "
        + " / ".join(f"{figures[f'{s}_img_s']:.0f}" for s in sides) + " img/s, step "
        + " / ".join(f"{figures[f'{s}_step_ms']:.1f}" for s in sides) + " ms, ckpt "
        + " / ".join(f"{figures[f'{s}_ckpt_ms']:.1f}" for s in sides) + " ms/epoch, peak "
        + " / ".join(f"{figures[f'{s}_peak_mib']:.0f}" for s in sides) + " MiB"
    )  # fmt: skip


def _cell(m: dict[str, Any], key: str, fmt: str, sides: tuple[str, ...] = SIDES) -> str:
    return " / ".join(format(m.get(f"{side}_{key}", float("nan")), fmt) for side in sides)


def table(results: dict[str, dict[str, Any]]) -> str:
    """Throughput and MFU (trainwell vs raw), then the gap split three ways, per mode."""
    lines = [
        "| mode | trainwell img/s | raw img/s | ratio (min) | MFU tw / raw | logged img/s, MFU "
        "| peak MiB tw / raw |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, res in results.items():
        m = res["median"]
        logged = f"{m.get('tw_logged_img_s', float('nan')):.0f}, {m.get('tw_logged_mfu', float('nan')):.3f}"
        lines.append(
            f"| {mode} | {m.get('tw_img_s', float('nan')):.0f} | {m.get('raw_img_s', float('nan')):.0f} "
            f"| {m.get('ratio', float('nan')):.3f} ({m.get('ratio_min', float('nan')):.3f}) "
            f"| {_cell(m, 'mfu', '.3f', ('tw', 'raw'))} | {logged} "
            f"| {_cell(m, 'peak_mib', '.0f', ('tw', 'raw'))} |"
        )
    lines += [
        "",
        "The gap split: raw -> bare Lightning (Lightning's share) -> trainwell (ours).",
        "",
        "| mode | img/s tw / bare / raw | bare / raw | tw / bare | step ms tw / bare / raw "
        "| fixed ms/epoch tw / bare / raw | ckpt ms | val set-up ms | other ms "
        "| after-ckpt step tw / bare / raw |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, res in results.items():
        m = res["median"]
        lines.append(
            f"| {mode} | {_cell(m, 'img_s', '.0f')} | {m.get('bare_ratio', float('nan')):.3f} "
            f"| {m.get('tw_vs_bare', float('nan')):.3f} | {_cell(m, 'step_ms', '.2f')} "
            f"| {_cell(m, 'fixed_ms', '.1f')} | {_cell(m, 'ckpt_ms', '.1f')} "
            f"| {_cell(m, 'val_setup_ms', '.1f')} | {_cell(m, 'other_ms', '.1f')} "
            f"| {_cell(m, 'after_ckpt', '.2f')} |"
        )
    return "\n".join(lines)


# -- op parity (--ops): the operations of one steady step, per side -------------------------------
OPS_BATCH = 3  # the profiled batch: the first ones allocate optimizer state and warm caches
# Operations that launch no kernel: views and aliases (metadata only).
VIEWS = frozenset(
    "aten::" + n
    for n in (
        "detach", "alias", "view", "_unsafe_view", "reshape", "select", "slice", "as_strided",
        "permute", "expand", "t", "transpose", "unsqueeze", "squeeze", "flatten", "lift_fresh",
        "numpy_T", "unbind", "split", "chunk", "narrow", "view_as", "expand_as",
    )
)  # fmt: skip
# Conversions: counted only when they copied (memory format, dtype); no-ops otherwise.
CONVERTERS = frozenset(("aten::to", "aten::contiguous", "aten::type_as"))
# Operations that copy: listed first, the tell-tale cost of a mode (channels_last above all).
COPIES = CONVERTERS | {"aten::_to_copy", "aten::copy_", "aten::clone"}


class OpWindow(L.Callback):
    """Profiles batch OPS_BATCH of the first epoch on the CPU: from its on_train_batch_start to
    the next batch's (the step, its hooks, the next batch's fetch and transfer)."""

    events: ClassVar[list[Any]] = []

    def __init__(self) -> None:
        self._prof: Any = None

    def mark(self, batch_idx: int) -> None:
        from torch.profiler import ProfilerActivity, profile

        if batch_idx == OPS_BATCH and self._prof is None:
            self._prof = profile(activities=[ProfilerActivity.CPU], with_stack=True)
            self._prof.__enter__()
        elif batch_idx == OPS_BATCH + 1 and self._prof is not None:
            self._prof.__exit__(None, None, None)
            OpWindow.events = list(self._prof.events())
            self._prof = None

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, i: int) -> None:
        self.mark(i)


def _origin(event: Any) -> str:
    """Where an operation comes from: the backward node or optimizer step that ran it, else the
    innermost Python frame outside torch (trainwell, the task, Lightning, this benchmark)."""
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name
        if name.startswith("autograd::engine::evaluate_function: "):
            return "backward " + name.split(": ", 1)[1]
        if "torch/optim/" in name:  # called from Lightning's loop or the raw loop: the same
            return "optimizer.step"
        if ".py(" in name and "/torch/" not in f"/{name}" and "torchmetrics/" not in name:
            return name.replace("site-packages/", "")
        parent = parent.cpu_parent
    return "?"


def op_counts(events: list[Any]) -> dict[str, Counter[str]]:
    """Per aten operation called from Python or a backward node (not one inside another), the
    count by origin; views and conversions that copied nothing are left out (no kernel)."""
    out: dict[str, Counter[str]] = {}
    for e in events:
        parent = e.cpu_parent
        if not e.name.startswith("aten::") or e.name in VIEWS:
            continue
        if parent is not None and parent.name.startswith("aten::"):
            continue
        if e.name in CONVERTERS and not any(c.name.startswith("aten::") for c in e.cpu_children):
            continue
        out.setdefault(e.name, Counter())[_origin(e)] += 1
    return out


def ops_of_side(side: str, overrides: list[str], channels_last: bool, tmp: Path) -> Counter:
    """One short fit of `side`, profiled at batch OPS_BATCH; the per-op counts by origin."""
    OpWindow.events = []
    window = OpWindow()
    if side == "tw":
        extra = ["+callbacks.bench_ops._target_=gpu_throughput.OpWindow"]
        if channels_last:
            extra.append("+callbacks.bench_cl._target_=loops.ChannelsLast")
        loops.run_trainwell([*overrides, *extra], 1, tmp)
    elif side == "bare":
        loops.run_bare(overrides, 1, tmp, channels_last=channels_last, extra_callbacks=(window,))
    else:
        built = loops.build_from_config(overrides, 1, tmp, channels_last=channels_last)
        optimizer, scheduler = built.optimization(built.net.parameters())
        loops.fit(
            built.net, built.datamodule.train_dataloader(), None, optimizer, scheduler, 1,
            built.accumulate, built.precision, max_batches=OPS_BATCH + 2, on_batch=window.mark,
            label_smoothing=float(built.cfg.model.label_smoothing),
        )  # fmt: skip
    if not OpWindow.events:
        raise RuntimeError(f"--ops: the {side} side never reached batch {OPS_BATCH + 1}")
    return op_counts(OpWindow.events)


def ops_table(mode: str, counts: dict[str, dict[str, Counter[str]]]) -> tuple[str, dict]:
    """The operations whose count differs from the raw loop's, copies first; figures."""
    names = sorted({n for side in counts.values() for n in side})
    total = {s: {n: sum(c.get(n, Counter()).values()) for n in names} for s, c in counts.items()}
    rows, figures = [], {}
    for side in ("tw", "bare"):
        extra = [n for n in names if total[side][n] > total["raw"][n]]
        figures[f"{mode}_{side}_extra_ops"] = sum(total[side][n] - total["raw"][n] for n in extra)
        figures[f"{mode}_{side}_extra_copies"] = sum(
            total[side][n] - total["raw"][n] for n in extra if n in COPIES
        )
    differ = [n for n in names if total["tw"][n] != total["raw"][n]]
    differ.sort(key=lambda n: (n not in COPIES, total["raw"][n] - total["tw"][n], n))
    for n in differ:
        # Per origin, trainwell's calls beyond the raw loop's from the same place (the net's
        # forward, the optimizer, the loader and backward nodes are shared origins).
        raw_origins = counts["raw"].get(n, Counter())
        origins = Counter(counts["tw"].get(n, Counter()))
        origins.subtract(raw_origins)
        where = "; ".join(f"{o} x{k}" for o, k in origins.most_common() if k > 0)
        rows.append(
            f"| {mode} | {n} | {total['tw'][n]} | {total['bare'][n]} | {total['raw'][n]} "
            f"| {total['tw'][n] - total['raw'][n]:+d} | {where} |"
        )
    return "\n".join(rows), figures


def measure_ops(args: argparse.Namespace) -> int:
    """--ops: per mode, the aten operations one steady step runs, trainwell and bare Lightning
    against the raw loop, with trainwell's GPU code paths (cadence.host_reads_are_free: no)."""
    from trainwell.callbacks import cadence

    cadence.host_reads_are_free = lambda device: False  # as on a GPU (benchmarks/sync_probe.py)
    header = (
        "| mode | op | tw | bare | raw | tw - raw | origin of trainwell's extra calls |\n"
        "|---|---|---|---|---|---|---|"
    )
    rows, figures = [header], {}
    for mode in args.modes:
        overrides, channels_last, _ = MODES[mode]
        overrides = [*base_overrides(args, False), *overrides]
        counts = {}
        try:
            with tempfile.TemporaryDirectory(prefix="tw-bench-ops-") as tmp:
                for side in SIDES:
                    counts[side] = ops_of_side(side, overrides, channels_last, Path(tmp) / side)
        except Exception as exc:  # compile may be unavailable on a CPU: report it, go on
            if "compile" not in mode:
                raise
            line = (
                str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            )
            print(f"[ops {mode}] compile unavailable on this CPU backend: {line}", flush=True)
            figures[f"{mode}_tw_extra_ops"] = "unavailable"
            continue
        text, found = ops_table(mode, counts)
        figures |= found
        rows.append(text or f"| {mode} | (none) | | | | 0 | |")
        print(f"[ops {mode}] extra ops per step: tw {found[f'{mode}_tw_extra_ops']}, bare "
              f"{found[f'{mode}_bare_extra_ops']}", flush=True)  # fmt: skip
    text = "\n".join(rows)
    print(text)
    out = harness.output_dir(args.out)
    if out is not None:
        (out / "step_ops.md").write_text(text + "\n")
    harness.final_line(**figures)
    return 0


def parser(cuda: bool) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # On CPU, compile needs a C++ toolchain and minutes, and channels_last has no tensor cores to
    # feed: the CPU smoke default is the two precision modes.
    cpu_modes = ["fp32", "bf16"]
    p.add_argument(
        "--modes", nargs="+", choices=list(MODES), default=list(MODES) if cuda else cpu_modes
    )
    p.add_argument("--data", choices=["on_device", "cpu"], default="on_device")
    p.add_argument("--num-samples", type=int, default=50_000 if cuda else 512)
    p.add_argument("--num-val", type=int, default=10_000 if cuda else 128)
    p.add_argument("--batch", type=int, default=512 if cuda else 32)
    p.add_argument("--width", type=int, default=64 if cuda else 8)
    p.add_argument("--epochs", type=int, default=3, help="the first is warm-up")
    p.add_argument("--reps", type=int, default=2 if cuda else 1)
    p.add_argument("--num-workers", type=int, default=0, help="data=cpu only")
    p.add_argument("--raw-ckpt", choices=["background", "sync", "none"], default="background")
    p.add_argument(
        "--sides",
        nargs="+",
        choices=list(SIDES),
        default=list(SIDES),
        help="tw: trainwell, bare: bare Lightning, raw: the hand-written loop",
    )
    p.add_argument("--out", default=None, help="folder for gpu_throughput.json (default: $OUT)")
    p.add_argument(
        "--ops",
        action="store_true",
        help="op parity instead: the aten operations of one steady step per side (CPU profiler)",
    )
    p.add_argument(
        "--no-cudnn-benchmark",
        action="store_true",
        help="leave torch.backends.cudnn.benchmark off (it is set for both sides by default)",
    )
    p.add_argument(
        "--tw-override",
        action="append",
        default=[],
        help="extra Hydra override for the trainwell side only (e.g. "
        "--tw-override=callbacks.throughput=null); repeatable",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    cuda = torch.cuda.is_available()
    title = f"P2 throughput on {'GPU ' + torch.cuda.get_device_name(0) if cuda else 'CPU'}"
    args = harness.parse_args(parser(cuda), argv, title, threads=0 if cuda else 1)
    if cuda and not args.no_cudnn_benchmark:
        torch.backends.cudnn.benchmark = True  # process-wide: both sides pick the same way
    if args.ops:
        return measure_ops(args)
    if not cuda:
        print("NOTE: no CUDA device: running on CPU for the smoke test; these are not GPU figures")
    results = measure(args)
    text = table(results)
    print(text)
    out = harness.output_dir(args.out)
    if out is not None:
        payload = {"args": vars(args), "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
        (out / "gpu_throughput.json").write_text(
            json.dumps({**payload, "modes": results}, indent=1)
        )
        (out / "gpu_throughput.md").write_text(text + "\n")
    figures: dict[str, float | str] = {"device": "cuda" if cuda else "cpu"}
    if all("tw_img_s" in r["median"] for r in results.values()):
        best = max(results, key=lambda m: results[m]["median"]["tw_img_s"])
        figures |= {"best_mode": best, "best_img_s": results[best]["median"]["tw_img_s"]}
    for mode, res in results.items():
        m = res["median"]
        for key in FINAL_KEYS:
            if key in m:
                figures[f"{mode}_{key}"] = m[key]
    harness.final_line(**figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
