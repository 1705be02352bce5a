"""P2: ResNet-18 training throughput, trainwell vs the hand-written loop with the same features.

    .venv/bin/python benchmarks/gpu_throughput.py                      # on a GPU box
    .venv/bin/python benchmarks/gpu_throughput.py --num-samples 256 --num-val 64 --batch 32 \\
        --width 8 --modes fp32 --epochs 2                             # tiny CPU smoke run

Both sides, interleaved A/B in one process (the order alternates between repetitions), run
`model=resnet18 data=synthetic` (CIFAR-shaped) through the SAME data path: by default the
on-device pipeline (`data.on_device=true data.augment=true`: uint8 on the GPU, crop + flip +
normalise per batch there), `--data cpu` for the DataLoader path. Both validate once per epoch
and checkpoint every epoch with the same policy (last.ckpt every epoch, best.ckpt when val
accuracy improved; atomic; written in the background on both sides, `--raw-ckpt sync` for an
inline-writing raw loop). The trainwell side is `train()` itself with its default callbacks
and CSV logger.

Modes:
  fp32             trainer.precision=32-true (TF32 matmuls: trainwell sets matmul precision high)
  bf16             trainer.precision=bf16-mixed
  bf16_cl          bf16 + channels_last: NHWC batches (data.channels_last) and an NHWC model
  bf16_cl_compile  + model.compile=true (torch.compile of the net, in place)

Figures per mode (medians over repetitions):
  img/s     training images / training seconds of the epochs after the first (the first pays
            compile, cudnn autotune, allocator warm-up); validation and checkpoints excluded
  ratio     trainwell img/s / raw img/s (target >= 0.97)
  mfu       trainwell img/s x FLOPs per image (FlopCounterMode, forward + backward) / the device's
            dense peak for the mode's compute dtype (Lightning's get_available_flops: TF32 for
            fp32, bf16 otherwise); mfu_bf16 divides by the bf16 peak in every mode
  logged    what trainwell's ThroughputLogger logged (median over the last epoch): img/s, MFU
  peak_mib  torch.cuda.max_memory_allocated over the run
  ckpt_ms / val_setup_ms / fixed_ms   per-epoch fixed costs on each side (see harness.fixed_costs)

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fit_timer
import harness
import raw_loop
import torch

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
    "raw_img_s",
    "ratio",
    "mfu",
    "tw_peak_mib",
    "tw_ckpt_ms",
    "raw_ckpt_ms",
    "tw_fixed_ms",
    "raw_fixed_ms",
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

    from project.models import ResNet18

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
    """Every mode, trainwell and raw, interleaved; per-mode figures (medians) and raw samples.

    `deadline` (time.perf_counter() value): pairs not started by then are skipped; `progress`
    gets the samples so far after every pair (a caller saves them, in case the process is
    stopped)."""
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
                tw_overrides.append("+callbacks.bench_cl._target_=fit_timer.ChannelsLast")

            def run_tw(tw_overrides: list[str] = tw_overrides) -> dict:
                with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
                    if cuda:
                        torch.cuda.reset_peak_memory_stats()
                    out = fit_timer.run_trainwell(
                        [*tw_overrides, *args.tw_override], args.epochs, Path(tmp)
                    )
                    out["images_per_epoch"] = args.num_samples
                    return {**out, **logged_figures(Path(tmp))}

            def run_raw(overrides: list[str] = overrides, cl: bool = channels_last) -> dict:
                with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
                    return raw_loop.run_from_config(
                        overrides, args.epochs, Path(tmp), device=device,
                        channels_last=cl, ckpt=args.raw_ckpt,
                    )  # fmt: skip

            pair = harness.rotated({"tw": run_tw, "raw": run_raw}, rep)
            tw, raw = pair["tw"], pair["raw"]
            row = samples[mode]
            figures = {
                "tw_img_s": images_per_second(tw),
                "raw_img_s": images_per_second(raw),
                "tw_peak_mib": tw["peak_memory"] / 2**20,
                "raw_peak_mib": raw["peak_memory"] / 2**20,
                **{f"tw_{k}": v for k, v in harness.fixed_costs(tw).items()},
                **{f"raw_{k}": v for k, v in harness.fixed_costs(raw).items()},
                **{f"tw_{k}": v for k, v in tw.items() if k.startswith("logged_")},
            }
            for key, value in figures.items():
                row.setdefault(key, []).append(value)
            if progress is not None:
                progress({"samples": samples})
            print(
                f"[rep {rep} {mode}] trainwell {figures['tw_img_s']:.0f} img/s, raw "
                f"{figures['raw_img_s']:.0f} img/s, peak {figures['tw_peak_mib']:.0f} / "
                f"{figures['raw_peak_mib']:.0f} MiB, ckpt {figures['tw_ckpt_ms']:.1f} / "
                f"{figures['raw_ckpt_ms']:.1f} ms/epoch",
                flush=True,
            )
    results: dict[str, dict[str, Any]] = {}
    for mode, row in samples.items():
        if not row:
            continue
        med = {k: statistics.median(v) for k, v in row.items()}
        tw = row["tw_img_s"]
        peak = dtype_peak(MODES[mode][2])
        med |= {
            "ratio": med["tw_img_s"] / med["raw_img_s"],
            "ratio_min": min(t / r for t, r in zip(tw, row["raw_img_s"], strict=True)),
            "tw_spread": (max(tw) - min(tw)) / 2 / med["tw_img_s"],
            "flops_per_image": flops,
            "mfu": med["tw_img_s"] * flops / peak if peak else float("nan"),
            "raw_mfu": med["raw_img_s"] * flops / peak if peak else float("nan"),
            "mfu_bf16": med["tw_img_s"] * flops / peak_bf16 if peak_bf16 else float("nan"),
            "peak_flops": peak or float("nan"),
            "reps": len(tw),
        }
        results[mode] = {"median": med, "samples": row}
    return results


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| mode | trainwell img/s | raw img/s | ratio (min) | MFU tw / raw | logged img/s, MFU "
        "| peak MiB tw / raw | ckpt ms/epoch tw / raw | val set-up ms tw / raw "
        "| fixed ms/epoch tw / raw |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, res in results.items():
        m = res["median"]
        logged = f"{m.get('tw_logged_img_s', float('nan')):.0f}, {m.get('tw_logged_mfu', float('nan')):.3f}"
        lines.append(
            f"| {mode} | {m['tw_img_s']:.0f} | {m['raw_img_s']:.0f} | {m['ratio']:.3f} "
            f"({m['ratio_min']:.3f}) | {m['mfu']:.3f} / {m['raw_mfu']:.3f} | {logged} "
            f"| {m['tw_peak_mib']:.0f} / {m['raw_peak_mib']:.0f} "
            f"| {m['tw_ckpt_ms']:.1f} / {m['raw_ckpt_ms']:.1f} "
            f"| {m['tw_val_setup_ms']:.1f} / {m['raw_val_setup_ms']:.1f} "
            f"| {m['tw_fixed_ms']:.1f} / {m['raw_fixed_ms']:.1f} |"
        )
    return "\n".join(lines)


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
    p.add_argument("--out", default=None, help="folder for gpu_throughput.json (default: $OUT)")
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
    best = max(results, key=lambda m: results[m]["median"]["tw_img_s"])
    figures |= {"best_mode": best, "best_img_s": results[best]["median"]["tw_img_s"]}
    for mode, res in results.items():
        m = res["median"]
        for key in FINAL_KEYS:
            figures[f"{mode}_{key}"] = m[key]
    harness.final_line(**figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
