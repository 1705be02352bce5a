"""P3/P4: memory trade-offs of gradient checkpointing and of gradient accumulation.

    .venv/bin/python benchmarks/memory.py                       # CPU, ResNet-18 width 16, batch 32
    .venv/bin/python benchmarks/memory.py --width 64 --batch 128 --device cuda

P3: ResNet-18 (the config's net, `model.net.grad_checkpointing` off/on) at one micro-batch:
    peak activation memory and peak total memory of one training step, and step time.
P4: accumulation K=1 at batch B vs K=4 at batch B/4 (equal effective batch B): peak memory of
    one optimizer step and images/s.

How memory is measured (stated with every figure):
  cpu  the torch profiler's memory view (profile_memory=True; its timeline of allocations by
       category: ACTIVATION, GRADIENT, PARAMETER, OPTIMIZER_STATE, TEMPORARY, ...), peak of the
       ACTIVATION category and peak of the sum of all categories during one step.
  cuda torch.cuda.max_memory_allocated() around one step (after reset_peak_memory_stats);
       activation peak = that peak minus what was allocated before the forward.
Times are medians of interleaved repetitions (profiling off).

Last line: `ckpt_act_ratio=.. ckpt_peak_ratio=.. ckpt_time_ratio=.. accum_peak_ratio=..
accum_throughput_ratio=..` (on/off and K=4/K=1 ratios) plus the absolute MiB and img/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from harness import compose, describe, final_line, interleaved, parse_args
from torch import nn

MIB = 2**20


def build_net(width: int, checkpointing: bool, device: torch.device) -> nn.Module:
    """The net exactly as `model=resnet18` configures it, with the two knobs set."""
    from hydra.utils import instantiate

    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(
            [
                "model=resnet18",
                f"model.net.width={width}",
                f"model.net.grad_checkpointing={str(checkpointing).lower()}",
            ],
            Path(tmp),
        )
    torch.manual_seed(0)
    return instantiate(cfg.model.net).to(device).train()


def make_step(
    net: nn.Module, batch: int, accumulate: int, device: torch.device
) -> Callable[[], int]:
    """One optimizer step over `accumulate` micro-batches of `batch` images; returns images."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(batch, 3, 32, 32, generator=gen).to(device) for _ in range(accumulate)]
    ys = [torch.randint(0, 10, (batch,), generator=gen).to(device) for _ in range(accumulate)]

    def step() -> int:
        for x, y in zip(xs, ys, strict=True):
            loss = nn.functional.cross_entropy(net(x), y) / accumulate
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return batch * accumulate

    return step


def peak_memory(step: Callable[[], int], device: torch.device) -> dict[str, float]:
    """Peak activation and total memory (MiB) of one step, by the method stated in the doc."""
    step()  # warm-up: optimizer state exists, as in every step after the first
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        return {"activation": (peak - before) / MIB, "total": peak / MIB}
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import (
        _CATEGORY_TO_INDEX,
        Category,
        MemoryProfileTimeline,
    )

    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        step()
    # Private API (torch 2.1+), the data behind prof.export_memory_timeline(): columns are
    # 1 + _CATEGORY_TO_INDEX[category], rows are cumulative sizes over time.
    _, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline(device)
    activation = 1 + _CATEGORY_TO_INDEX[Category.ACTIVATION]
    return {
        "activation": max(row[activation] for row in sizes) / MIB,
        "total": max(sum(row) for row in sizes) / MIB,
    }


def time_steps(steps: dict[str, Callable[[], int]], reps: int, device: torch.device) -> dict:
    """Seconds per step and images/s for each named step, interleaved, median over reps."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for fn in steps.values():
        fn()  # warm-up

    def timed_step(fn: Callable[[], int]) -> tuple[float, int]:
        sync()
        begin = time.perf_counter()
        images = fn()
        sync()  # the step's kernels are done when the clock is read
        return time.perf_counter() - begin, images

    runs = interleaved({k: (lambda fn=fn: timed_step(fn)) for k, fn in steps.items()}, reps)
    return {k: ([s for s, _ in v], v[-1][1]) for k, v in runs.items()}


def memory_method(device: torch.device) -> str:
    return (
        "torch.cuda.max_memory_allocated"
        if device.type == "cuda"
        else "torch profiler memory timeline"
    )


def title(args: argparse.Namespace) -> str:
    device = torch.device(args.device)
    return f"P3/P4 memory on {device.type} ({memory_method(device)}), ResNet-18 width {args.width}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=16, help="ResNet-18 base width (64 = paper)")
    parser.add_argument("--batch", type=int, default=32, help="images per optimizer step")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parse_args(parser, argv, title)
    device = torch.device(args.device)
    method = memory_method(device)
    if args.batch % 4:
        raise SystemExit("--batch must be divisible by 4 (K=4 at equal effective batch)")

    nets = {
        "ckpt_off": make_step(build_net(args.width, False, device), args.batch, 1, device),
        "ckpt_on": make_step(build_net(args.width, True, device), args.batch, 1, device),
        "k4": make_step(build_net(args.width, False, device), args.batch // 4, 4, device),
    }
    memory = {name: peak_memory(step, device) for name, step in nets.items()}
    timing = time_steps(nets, args.reps, device)
    for name in nets:
        secs, imgs = timing[name]
        print(
            f"{name}: peak activation {memory[name]['activation']:.1f} MiB, peak total "
            f"{memory[name]['total']:.1f} MiB ({method}); "
            + describe("s/step", secs, "s")
            + f"; {imgs / statistics.median(secs):.1f} img/s"
        )
    step_s = {name: statistics.median(timing[name][0]) for name in nets}
    img_s = {name: timing[name][1] / step_s[name] for name in nets}
    final_line(
        device=device.type,
        ckpt_off_act_mib=memory["ckpt_off"]["activation"],
        ckpt_on_act_mib=memory["ckpt_on"]["activation"],
        ckpt_act_ratio=memory["ckpt_on"]["activation"] / memory["ckpt_off"]["activation"],
        ckpt_peak_ratio=memory["ckpt_on"]["total"] / memory["ckpt_off"]["total"],
        ckpt_time_ratio=step_s["ckpt_on"] / step_s["ckpt_off"],
        k1_peak_mib=memory["ckpt_off"]["total"],
        k4_peak_mib=memory["k4"]["total"],
        accum_peak_ratio=memory["k4"]["total"] / memory["ckpt_off"]["total"],
        k1_img_s=img_s["ckpt_off"],
        k4_img_s=img_s["k4"],
        accum_throughput_ratio=img_s["k4"] / img_s["ckpt_off"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
