"""Every GPU figure docs/benchmarks.md asks for, in one or two invocations of under 10 minutes.

    python benchmarks/gpu_suite.py --part throughput   # ~7-9 min on an H100 (budget 560 s)
    python benchmarks/gpu_suite.py --part features     # ~4-5 min on an H100
    python benchmarks/gpu_suite.py --part syncs        # ~2-3 min on an H100
    python benchmarks/gpu_suite.py --part all --smoke  # the CPU path, tiny sizes (the tests)

Part `throughput` (`benchmarks/pace.py throughput`): ResNet-18 width 64, batch 512, 50k synthetic
images on the on-device data path, fp32 / bf16 / +channels_last / +compile, trainwell vs bare
Lightning vs the raw loop with the same features, interleaved: img/s, the ratios (trainwell /
raw, target >= 0.97; bare / raw: Lightning's share; trainwell / bare: ours, target >= 1.0), MFU,
peak memory, step time and the per-epoch fixed costs (checkpoint, validation set-up, the rest)
in ms, and the first step after a checkpoint against a steady one.

Part `features`:
  accum_*     `experiment=resnet_accum data=synthetic` (micro-batch 128 x K=4, on-device data)
              with bf16-mixed, 16-mixed (GradScaler; gradient_clip_val=1 clips after unscaling),
              bf16 + compile, bf16 + grad checkpointing off / on (peak memory, img/s), and
              trainer=fsdp on one GPU: img/s, peak MiB, final train loss, val accuracy
  grad_ckpt   `benchmarks/features.py memory` at width 64, batch 512: activation memory with checkpointing
              on / off (target <= 0.60) and step time (target <= 1.35)

Part `syncs`:
  host_syncs  benchmarks/host_syncs.py: syncs in steady training steps (target 0 of trainwell's),
              per case (default, k1, k4, lm) in bf16 (+ channels_last for the CIFAR-shaped cases),
              counted with set_sync_debug_mode("warn") and attributed to trainwell / Lightning
  strict      the same runs with set_sync_debug_mode("error") in every steady step: a sync
              there fails the run
  gpu_tests   `pytest -m gpu` in a subprocess (the sync tests, CPU = GPU data batches)

Results go to <--out or $OUT>/gpu_suite.json (rewritten after every item, so a run stopped at
its time limit keeps what it measured) and gpu_suite.md (the tables). Items that would not fit
in --budget-s are skipped and say so. Needs hydra-core and omegaconf (the config tree); trainwell
itself is used from this checkout's src/ when it is not installed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from harness import REPO, compose, final_line, machine, output_dir, parse_args

# name -> trainwell overrides on top of ACCUM (experiment=resnet_accum on synthetic data)
FEATURES: dict[str, list[str]] = {
    "accum_bf16": ["trainer.precision=bf16-mixed"],
    "accum_fp16_clip": ["trainer.precision=16-mixed", "trainer.gradient_clip_val=1.0"],
    "accum_bf16_compile": ["trainer.precision=bf16-mixed", "model.compile=true"],
    "accum_bf16_gradckpt_off": ["trainer.precision=bf16-mixed"],
    "accum_bf16_gradckpt_on": ["trainer.precision=bf16-mixed", "model.net.grad_checkpointing=true"],
    # Last: Lightning leaves its (1-rank) process group initialised after fit.
    "accum_fsdp_1gpu": ["trainer=fsdp", "trainer.devices=1", "trainer.precision=bf16-mixed"],
}


# The files holding `gpu` tests: collecting all of tests/ would import what a GPU box may lack
# (nbclient for the notebook tests).
GPU_TESTS = ["tests/loading/test_on_device.py", "tests/callbacks/test_host_syncs.py"]


class Suite:
    """Runs items within a time budget and keeps the JSON on disk current."""

    def __init__(self, out: Path | None, budget_s: float) -> None:
        self.out, self.budget_s, self.start = out, budget_s, time.perf_counter()
        self.results: dict[str, Any] = {"machine": machine(), "command": sys.argv, "items": {}}
        self.tables: list[str] = []

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)

    def run(self, name: str, needs_s: float, fn: Callable[[], dict[str, Any]]) -> None:
        if self.left() < needs_s:
            self.results["items"][name] = {"skipped": f"time budget: {self.left():.0f} s left"}
            print(f"== {name}: skipped, {self.left():.0f} s left of the budget", flush=True)
        else:
            print(f"== {name} ({self.left():.0f} s left)", flush=True)
            begin = time.perf_counter()
            try:
                item = fn()
            except Exception as err:  # recorded: one failing item must not lose the others
                item = {"error": f"{type(err).__name__}: {err}"}
                print(f"== {name} failed: {item['error']}", flush=True)
            item["seconds"] = time.perf_counter() - begin
            self.results["items"][name] = item
        self.save()

    def save(self) -> None:
        if self.out is None:
            return
        (self.out / "gpu_suite.json").write_text(json.dumps(self.results, indent=1, default=str))
        (self.out / "gpu_suite.md").write_text("\n\n".join(self.tables) + "\n")


# -- throughput --------------------------------------------------------------------------------
def throughput(suite: Suite, smoke: bool, reps: int | None) -> tuple[dict[str, Any], str]:
    import pace

    argv = ["--out", tempfile.mkdtemp(prefix="tw-suite-")]
    if smoke:
        argv += [
            *("--num-samples", "96", "--num-val", "32", "--batch", "16", "--width", "4"),
            *("--modes", "fp32", "--epochs", "2", "--reps", "1"),
        ]
    elif reps is not None:
        argv += ["--reps", str(reps)]
    args = pace.throughput_options(argv)

    def keep(partial: dict[str, Any]) -> None:
        suite.results["items"]["throughput_so_far"] = partial
        suite.save()

    # Repetitions after the first start only while ~90 s (a compile-mode pair) are left.
    deadline = time.perf_counter() + suite.left() - 90
    results = pace.measure(args, deadline=deadline, progress=keep)
    suite.results["items"].pop("throughput_so_far", None)
    return {"args": vars(args), "modes": results}, pace.table(results)


# -- features ----------------------------------------------------------------------------------
def accum_overrides(smoke: bool) -> list[str]:
    sizes = ["data.num_samples=20000", "data.num_val=2000", "model.net.width=64"]
    if smoke:
        sizes = ["data.num_samples=64", "data.num_val=16", "model.net.width=4", "data.batch_size=8"]
    return [
        "experiment=resnet_accum",
        "data=synthetic",
        "data.on_device=true",
        "data.augment=true",
        *sizes,
        f"trainer={'gpu' if torch.cuda.is_available() else 'cpu'}",
        "trainer.num_sanity_val_steps=0",
        "callbacks.early_stopping=null",
    ]


def feature_run(name: str, smoke: bool) -> dict[str, Any]:
    import loops
    import pace

    overrides = [*accum_overrides(smoke), *FEATURES[name]]
    gpu_only = {"trainer.precision=16-mixed", "trainer=fsdp", "model.compile=true"}
    if not torch.cuda.is_available() and gpu_only & set(overrides):
        # CPU smoke: fp16 and 1-GPU FSDP need CUDA, compile a toolchain and minutes.
        return {"skipped": "needs CUDA"}
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory(prefix="tw-suite-") as tmp:
        run = loops.run_trainwell(overrides, 2, Path(tmp))
        run["images_per_epoch"] = int(compose(overrides, Path(tmp)).data.num_samples)
    return {
        "overrides": overrides,
        "img_s": pace.images_per_second(run),
        "peak_mib": run["peak_memory"] / 2**20,
        "train_loss": run["train_loss"],
        "val_loss": run["val_loss"],
        "finite": math.isfinite(run["train_loss"]) and math.isfinite(run["val_loss"]),
        "epoch_seconds": run["epoch_seconds"],
    }


def feature_table(items: dict[str, Any]) -> str:
    lines = ["| run | img/s | peak MiB | train loss | val loss |", "|---|---|---|---|---|"]
    for name in FEATURES:
        item = items.get(name, {})
        if "img_s" in item:
            lines.append(
                f"| {name} | {item['img_s']:.0f} | {item['peak_mib']:.0f} | "
                f"{item['train_loss']:.4f} | {item['val_loss']:.4f} |"
            )
        else:
            why = item.get("skipped") or item.get("error") or "not run"
            lines.append(f"| {name} | {why} | | | |")
    return "\n".join(lines)


def grad_ckpt_memory(smoke: bool) -> dict[str, Any]:
    import features

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    width, batch, reps = (4, 8, 1) if smoke else (64, 512, 5)
    sides = {"off": (False, 1), "on": (True, 1)}
    mem, seconds, _ = features.memory_sides(width, batch, reps, device, sides)
    return {
        "width": width,
        "batch": batch,
        "method": "cuda max_memory_allocated" if device.type == "cuda" else "profiler timeline",
        "activation_mib": {k: v["activation"] for k, v in mem.items()},
        "peak_mib": {k: v["total"] for k, v in mem.items()},
        "activation_ratio_on_off": mem["on"]["activation"] / mem["off"]["activation"],
        "step_seconds": seconds,
        "step_time_ratio_on_off": seconds["on"] / seconds["off"],
    }


# case -> mode of the `syncs` part: the mode with the largest gap where the batches are images
SYNC_RUNS = {"default": "bf16", "k1": "bf16_cl", "k4": "bf16_cl", "lm": "bf16"}


def host_syncs_item(case: str, smoke: bool) -> dict[str, Any]:
    import host_syncs

    width, samples = (4, 960) if smoke else (16, 3840)
    result = host_syncs.count_syncs(case, SYNC_RUNS[case], width=width, samples=samples)
    result["passed"] = bool(result["planted_seen"]) and result["steady_ours"] == 0
    result.pop("batches")  # per-batch detail stays in host_syncs.json when run alone
    return result


def strict_item(case: str) -> dict[str, Any]:
    import host_syncs

    return host_syncs.strict_run(case, SYNC_RUNS[case], width=16, samples=3840)


def gpu_tests() -> dict[str, Any]:
    try:
        import pytest  # noqa: F401
    except ImportError:
        return {"skipped": "pytest is not installed"}
    paths = os.environ.get("PYTHONPATH", "")  # carried wheels (hydra-core, omegaconf) stay visible
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *GPU_TESTS],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), paths])},
        capture_output=True,
        text=True,
        timeout=420,
    )
    return {"returncode": proc.returncode, "tail": (proc.stdout + proc.stderr)[-3000:]}


def headline(items: dict[str, Any]) -> dict[str, float | int | str]:
    """The suite's figure line: the target figures of every item that ran (the JSON has all)."""
    figures: dict[str, float | int | str] = {
        "device": "cuda" if torch.cuda.is_available() else "cpu"
    }
    for mode, res in items.get("throughput", {}).get("modes", {}).items():
        for key in ("tw_img_s", "ratio", "bare_ratio", "tw_vs_bare", "tw_after_ckpt"):
            if key in res["median"]:
                figures[f"{mode}_{key}"] = res["median"][key]
    for name in FEATURES:
        if "img_s" in items.get(name, {}):
            figures[f"{name}_img_s"] = items[name]["img_s"]
            figures[f"{name}_peak_mib"] = items[name]["peak_mib"]
    grad_ckpt = items.get("grad_ckpt_memory", {})
    if "activation_ratio_on_off" in grad_ckpt:
        figures["grad_ckpt_act_ratio"] = grad_ckpt["activation_ratio_on_off"]
        figures["grad_ckpt_time_ratio"] = grad_ckpt["step_time_ratio_on_off"]
    for case in SYNC_RUNS:
        syncs = items.get(f"host_syncs_{case}", {})
        if "passed" in syncs:
            figures[f"host_syncs_{case}_ours"] = syncs["steady_ours"]
            figures[f"host_syncs_{case}_lightning"] = syncs["steady_lightning"]
        strict = items.get(f"strict_{case}", {})
        if "passed" in strict:
            figures[f"strict_{case}"] = int(strict["passed"])
    if "returncode" in items.get("gpu_tests", {}):
        figures["gpu_tests_rc"] = items["gpu_tests"]["returncode"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["throughput", "features", "syncs", "all"], default="all")
    parser.add_argument("--budget-s", type=float, default=560.0, help="stop starting new items")
    parser.add_argument("--reps", type=int, default=None, help="throughput repetitions")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the CPU test)")
    parser.add_argument("--no-cudnn-benchmark", action="store_true")
    parser.add_argument("--out", default=None)
    cuda = torch.cuda.is_available()
    args = parse_args(parser, argv, lambda a: f"GPU suite, part {a.part}", threads=0 if cuda else 1)
    if cuda and not args.no_cudnn_benchmark:
        # Process-wide, so the trainwell and raw sides run with the same cudnn algorithms.
        torch.backends.cudnn.benchmark = True
    if not cuda:
        print("NOTE: no CUDA device: the CPU path with tiny sizes; these are not GPU figures")
    suite = Suite(output_dir(args.out), args.budget_s)
    suite.results["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    if args.part in ("throughput", "all"):
        box: dict[str, str] = {}

        def run_throughput() -> dict[str, Any]:
            result, box["table"] = throughput(suite, args.smoke, args.reps)
            return result

        suite.run("throughput", 60, run_throughput)
        if "table" in box:
            suite.tables.append("### Throughput\n\n" + box["table"])
            suite.save()
    if args.part in ("features", "all"):
        for name in FEATURES:
            suite.run(
                name, 90 if "compile" in name else 30, lambda n=name: feature_run(n, args.smoke)
            )
        suite.tables.append("### resnet_accum features\n\n" + feature_table(suite.results["items"]))
        suite.run("grad_ckpt_memory", 30, lambda: grad_ckpt_memory(args.smoke))
        suite.save()
    if args.part in ("syncs", "all"):
        if args.smoke:  # the CPU probe's runs are tests/callbacks/ and src/project/tests/'s
            suite.results["items"]["host_syncs"] = {"skipped": "--smoke"}
        else:
            for case in SYNC_RUNS:
                suite.run(f"host_syncs_{case}", 40, lambda c=case: host_syncs_item(c, False))
            if cuda:
                for case in SYNC_RUNS:
                    suite.run(f"strict_{case}", 40, lambda c=case: strict_item(c))
            suite.run("gpu_tests", 120, gpu_tests)
        suite.save()
    print(json.dumps(suite.results["items"], indent=1, default=str)[-6000:])
    for table in suite.tables:
        print(table)
    final_line(**headline(suite.results["items"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
