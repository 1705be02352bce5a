"""P2: ResNet-18 training throughput on a GPU, trainwell vs the hand-written loop, per mode.

    .venv/bin/python benchmarks/gpu_throughput.py                      # on a GPU box
    .venv/bin/python benchmarks/gpu_throughput.py --num-samples 256 --batch 32 --width 8 \
        --modes fp32 --epochs 2                                       # tiny CPU smoke run

Modes (each for trainwell and the raw loop, interleaved; `model=resnet18 data=synthetic`):
  fp32         trainer.precision=32-true (TF32 matmuls on: trainwell sets matmul precision high)
  bf16         trainer.precision=bf16-mixed
  bf16_cl      bf16 + the model in channels_last (a benchmark callback; inputs stay NCHW)
  bf16_cl_compile  + model.compile=true (torch.compile of the net, in place)
images/s = training images / train time of the epochs after the first (the first pays compile,
cudnn autotune, allocator warm-up); validation is excluded from the figure on both sides.
Peak memory: torch.cuda.max_memory_allocated over the run. MFU = achieved training FLOP/s
(FlopCounterMode's forward+backward count for this net, x images/s) / the GPU's dense bf16 peak
from the table below (fp32 modes are also divided by the bf16 peak, so modes compare).

On a machine without CUDA it runs the same code on the CPU and says so (for the smoke test);
those figures are not GPU figures.

Last line: `device=.. best_mode=.. best_img_s=.. <mode>_tw_img_s=.. <mode>_raw_img_s=..
<mode>_ratio=.. <mode>_mfu=.. <mode>_peak_mib=..`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import fit_timer
import raw_loop
import torch
from harness import add_common_args, final_line, header, set_threads

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

MODES = {
    "fp32": (["trainer.precision=32-true"], False),
    "bf16": (["trainer.precision=bf16-mixed"], False),
    "bf16_cl": (["trainer.precision=bf16-mixed"], True),
    "bf16_cl_compile": (["trainer.precision=bf16-mixed", "model.compile=true"], True),
}


def bf16_peak(name: str) -> float | None:
    for key in sorted(BF16_PEAK_TFLOPS, key=len, reverse=True):  # most specific match first
        if key.lower() in name.lower():
            return BF16_PEAK_TFLOPS[key] * 1e12
    return None


def train_flops_per_image(width: int) -> float:
    """Forward + backward FLOPs of one 3x32x32 image through the configured ResNet-18."""
    from torch.utils.flop_counter import FlopCounterMode

    from trainwell.models import ResNet18

    net = ResNet18(width=width)
    x = torch.randn(2, 3, 32, 32)
    with FlopCounterMode(display=False) as counter:
        net(x).sum().backward()
    return counter.get_total_flops() / 2


def images_per_second(run: dict, batch: int) -> float:
    """Training images / training seconds of the epochs after the first."""
    seconds = run["train_seconds"][1:] or run["train_seconds"]
    images = run["images_per_epoch"] * len(seconds)
    return images / sum(seconds)


def main(argv: list[str] | None = None) -> int:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # On CPU, compile needs a C++ toolchain and minutes, and channels_last has no tensor cores to
    # feed: the CPU smoke default is the two precision modes.
    cpu_modes = ["fp32", "bf16"]
    parser.add_argument(
        "--modes", nargs="+", choices=list(MODES), default=list(MODES) if cuda else cpu_modes
    )
    parser.add_argument("--num-samples", type=int, default=50_000 if cuda else 512)
    parser.add_argument("--batch", type=int, default=512 if cuda else 32)
    parser.add_argument("--width", type=int, default=64 if cuda else 8)
    parser.add_argument("--epochs", type=int, default=3, help="the first is warm-up")
    parser.add_argument("--reps", type=int, default=2 if cuda else 1)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument(
        "--tw-override",
        action="append",
        default=[],
        help="extra Hydra override for the trainwell side only (e.g. "
        "--tw-override=callbacks.non_finite_guard.sync_every=50); repeatable",
    )
    add_common_args(parser, threads=0 if cuda else 1)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    device = torch.device("cuda" if cuda else "cpu")
    header(f"P2 throughput on {'GPU ' + torch.cuda.get_device_name(0) if cuda else 'CPU'}")
    if not cuda:
        print("NOTE: no CUDA device: running on CPU for the smoke test; these are not GPU figures")
        if "bf16_cl_compile" in args.modes:
            print("NOTE: torch.compile on CPU needs a C++ toolchain and minutes; run as requested")
    base = [
        "model=resnet18",
        "data=synthetic",
        f"data.num_samples={args.num_samples}",
        f"data.batch_size={args.batch}",
        f"data.num_workers={args.num_workers}",
        f"model.net.width={args.width}",
        "model.scheduler=null",  # constant LR: no schedule maths on either side
        f"trainer={'gpu' if cuda else 'cpu'}",
        "trainer.num_sanity_val_steps=0",
    ]
    peak = bf16_peak(torch.cuda.get_device_name(0)) if cuda else None
    flops = train_flops_per_image(args.width)
    print(f"training FLOPs per image (fwd+bwd, FlopCounterMode): {flops / 1e9:.3f} GFLOP")
    print(f"bf16 dense peak: {peak / 1e12:.0f} TFLOP/s" if peak else "bf16 peak: unknown device")
    rows: dict[str, dict[str, list[float]]] = {
        m: {"tw": [], "raw": [], "tw_mem": [], "raw_mem": []} for m in args.modes
    }
    for rep in range(args.reps):
        for mode in args.modes:
            overrides, channels_last = MODES[mode]
            overrides = [*base, *overrides]
            if channels_last:
                overrides.append("+callbacks.bench_cl._target_=fit_timer.ChannelsLast")
            with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                tw = fit_timer.run_trainwell(
                    [*overrides, *args.tw_override], args.epochs, Path(tmp)
                )
                tw["images_per_epoch"] = args.num_samples
                raw = raw_loop.run_from_config(
                    [o for o in overrides if "bench_cl" not in o],
                    args.epochs,
                    Path(tmp),
                    device=device,
                    channels_last=channels_last,
                )
            row = rows[mode]
            row["tw"].append(images_per_second(tw, args.batch))
            row["raw"].append(images_per_second(raw, args.batch))
            row["tw_mem"].append(tw["peak_memory"] / 2**20)
            row["raw_mem"].append(raw["peak_memory"] / 2**20)
            print(
                f"[rep {rep} {mode}] trainwell {row['tw'][-1]:.0f} img/s, raw {row['raw'][-1]:.0f}"
                f" img/s, peak {row['tw_mem'][-1]:.0f} / {row['raw_mem'][-1]:.0f} MiB",
                flush=True,
            )
    figures: dict[str, float | str] = {"device": "cuda" if cuda else "cpu"}
    best_mode, best_rate = "", 0.0
    for mode, row in rows.items():
        tw, raw = statistics.median(row["tw"]), statistics.median(row["raw"])
        mfu = tw * flops / peak if peak else float("nan")
        spread = (max(row["tw"]) - min(row["tw"])) / 2 / tw
        print(
            f"{mode}: trainwell {tw:.0f} img/s (+/-{100 * spread:.1f}%), raw {raw:.0f} img/s, "
            f"ratio {tw / raw:.3f}, MFU {100 * mfu:.1f}%, peak {max(row['tw_mem']):.0f} MiB"
        )
        figures |= {
            f"{mode}_tw_img_s": tw,
            f"{mode}_raw_img_s": raw,
            f"{mode}_ratio": tw / raw,
            f"{mode}_mfu": mfu,
            f"{mode}_peak_mib": max(row["tw_mem"]),
        }
        if tw > best_rate:
            best_mode, best_rate = mode, tw
    final_line(best_mode=best_mode, best_img_s=best_rate, **figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
