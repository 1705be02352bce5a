"""What saving numpy state costs a run, and what the step-0 checkpoint check costs the default run.

    .venv/bin/python benchmarks/state_checkpoint.py                # default digits runs, 3 reps
    .venv/bin/python benchmarks/state_checkpoint.py --epochs 1 --reps 1

Four sides, each a full `training.run.train` of the default digits run (the config
`python scripts/train.py` composes; progress bar and config print off) timed from the call to
results.json, interleaved so the machine's load hits every side alike:

* `default`: the run as shipped (its datamodule keeps two Python floats);
* `no_step0`: the same run with the step-0 check (callbacks/checkpoint_rehearsal.py) replaced by
  a no-op: the whole-run cost of the check, within the runs' noise;
* `lists` / `numpy`: digits with a datamodule that also fits per-pixel statistics on the training
  split and keeps them as Python lists and floats, or as numpy arrays and scalars (the same
  values, the same work): what saving (and, at testing, reading back) numpy state costs.

The step-0 check is also timed inside every run (the seconds spent in it), and its share of the
default run is that time over the run's time: the figure that must stay under 2%.

Wall and CPU seconds are both reported: on a shared machine the CPU time of the run's process
(one thread, no loader workers) is the steadier figure.

Last line: `default_s=.. no_step0_s=.. lists_s=.. numpy_s=.. numpy_over_lists=..
numpy_over_lists_cpu=.. step0_s=.. step0_share=.. step0_share_cpu=.. default_over_no_step0_cpu=..`

    .venv/bin/python benchmarks/state_checkpoint.py --no-runs --large-mparams 60 --array-mib 256

`--large-mparams N` adds the step-0 check on a large model: an MLP of about N million float32
parameters with AdamW, its checkpoint built as Lightning builds it (weights, optimizer state,
loops, a datamodule state holding a float64 numpy array of `--array-mib` MiB), fresh (no
optimizer moments yet) and resumed (after one step: the moments exist). Each side is the check
as the run makes it (tensors as stand-ins of their dtype and shape) beside the check carrying
every payload (what it did before): its extra peak memory (the process's resident set, sampled
every half millisecond, over its size before the check) and its time, as a share of the
checkpoint's size. Adds `large_ckpt_mib_<fresh|resumed>`, `large_extra_share_<..>`,
`large_payload_extra_share_<..>`, `large_s_<..>`, `large_payload_s_<..>` to the last line.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import compose, final_line, interleaved, parse_args, summary, timed

QUIET = [
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
]
STATEFUL = "state_datamodules"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=None, help="default: the config's")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-runs", action="store_true", help="skip the digits runs")
    parser.add_argument("--large-mparams", type=int, default=0, help="0: no large-model figures")
    parser.add_argument("--array-mib", type=int, default=256)
    args = parse_args(parser, argv, "state checkpoint: digits, numpy vs lists, step-0 share")
    figures = {} if args.no_runs else digits_runs(args)
    if args.large_mparams:
        figures |= large_model(args.large_mparams, args.array_mib, args.reps)
    final_line(**figures)


def digits_runs(args: argparse.Namespace) -> dict[str, float]:

    from trainwell.callbacks import checkpoint_rehearsal
    from trainwell.io.checkpoint_write import Rehearsal
    from trainwell.training.run import train

    overrides = list(QUIET)
    if args.epochs is not None:
        overrides.append(f"trainer.max_epochs={args.epochs}")
    root = Path(tempfile.mkdtemp(prefix="state_checkpoint-"))
    real = checkpoint_rehearsal.rehearse
    spent: list[tuple[float, float]] = []  # (wall, CPU) seconds in the step-0 check

    def timed_rehearse(trainer: Any, datamodule: Any = None, payloads: bool = True) -> Rehearsal:
        wall, cpu = time.perf_counter(), time.process_time()
        outcome = real(trainer, datamodule, payloads)
        spent.append((time.perf_counter() - wall, time.process_time() - cpu))
        return outcome

    def skipped(trainer: Any, datamodule: Any = None, payloads: bool = True) -> Rehearsal:
        return Rehearsal()  # passed, having saved and read nothing

    def side(name: str, extra: list[str], rehearse: Any) -> Any:
        def run() -> dict[str, float]:
            run_dir = root / name
            shutil.rmtree(run_dir, ignore_errors=True)
            cfg = compose([*overrides, *extra], run_dir)
            checkpoint_rehearsal.rehearse = rehearse
            spent.clear()
            try:
                wall, cpu, _ = timed(lambda: train(cfg))
            finally:
                checkpoint_rehearsal.rehearse = real
            assert (run_dir / "results.json").is_file()
            return {
                "wall": wall,
                "cpu": cpu,
                "step0_wall": sum(w for w, _ in spent),
                "step0_cpu": sum(c for _, c in spent),
            }

        return run

    sides = {
        "default": side("default", [], timed_rehearse),
        "no_step0": side("no_step0", [], skipped),
        "lists": side("lists", [f"data._target_={STATEFUL}.ListStatsDigits"], timed_rehearse),
        "numpy": side("numpy", [f"data._target_={STATEFUL}.NumpyStatsDigits"], timed_rehearse),
    }
    try:
        for run in sides.values():  # warm-up: imports, first-call costs
            run()
        times = interleaved(sides, args.reps)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def median(name: str, key: str) -> float:
        return summary([run[key] for run in times[name]])["median"]

    for name, runs in times.items():
        w, c = summary([r["wall"] for r in runs]), summary([r["cpu"] for r in runs])
        print(
            f"{name:9s} to results.json: {w['median']:.2f} s wall (spread {w['spread']:.1%}), "
            f"{c['median']:.2f} s CPU (spread {c['spread']:.1%})"
        )
    share = summary([r["step0_wall"] / r["wall"] for r in times["default"]])["median"]
    share_cpu = summary([r["step0_cpu"] / r["cpu"] for r in times["default"]])["median"]
    print(
        f"numpy / lists: {median('numpy', 'wall') / median('lists', 'wall'):.3f} wall, "
        f"{median('numpy', 'cpu') / median('lists', 'cpu'):.3f} CPU"
    )
    print(
        f"step-0 check in the default run: {1000 * median('default', 'step0_wall'):.1f} ms, "
        f"{share:.3%} of the run's wall time, {share_cpu:.3%} of its CPU time"
    )
    print(
        f"default / no step-0 check: {median('default', 'cpu') / median('no_step0', 'cpu'):.3f} "
        "CPU (the check's share is below the runs' noise)"
    )
    return dict(
        default_s=median("default", "wall"),
        no_step0_s=median("no_step0", "wall"),
        lists_s=median("lists", "wall"),
        numpy_s=median("numpy", "wall"),
        numpy_over_lists=median("numpy", "wall") / median("lists", "wall"),
        numpy_over_lists_cpu=median("numpy", "cpu") / median("lists", "cpu"),
        step0_s=median("default", "step0_wall"),
        step0_share=share,
        step0_share_cpu=share_cpu,
        default_over_no_step0_cpu=median("default", "cpu") / median("no_step0", "cpu"),
    )


def _rss() -> int:
    """The process's resident set in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_extra(fn: Any) -> tuple[float, int]:
    """(seconds, peak resident bytes over those before) of fn(), sampled every 0.5 ms."""
    before, peak, done = _rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    return seconds, max(peak[0], _rss()) - before


def large_model(mparams: int, array_mib: int, reps: int) -> dict[str, float]:
    """The step-0 check's extra memory and time on a large model, fresh and resumed."""
    import gc

    import numpy as np
    import torch

    from trainwell.io.checkpoint_write import AtomicCheckpointIO, Rehearsal

    width = 2048
    layers = max(1, round(mparams * 1e6 / (width * width + width)))
    net = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    array = np.random.default_rng(0).random(array_mib * 2**20 // 8)  # float64
    writer = AtomicCheckpointIO()
    params = sum(p.numel() for p in net.parameters())
    print(f"large model: {params / 1e6:.1f}M parameters, AdamW, numpy state {array_mib} MiB")

    def checkpoint() -> dict[str, Any]:
        return {  # Lightning's dump_checkpoint: references to the live tensors, not copies
            "epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6",
            "state_dict": net.state_dict(), "loops": {"fit_loop": {"state_dict": {}}},
            "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
            "callbacks": {"ExactResume": {"rng": [1, 2, 3]}},
            "LargeData": {"mean": array, "count": np.int64(7), "names": ["a", "b"]},
        }  # fmt: skip

    figures: dict[str, float] = {}
    for stage in ("fresh", "resumed"):
        if stage == "resumed":  # one step: AdamW's moments now exist (2x the weights)
            net(torch.zeros(1, width)).sum().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        size = Rehearsal(payloads=True)
        size.run(writer, checkpoint())
        ckpt_bytes = size.bytes
        del size
        gc.collect()

        def side(payloads: bool) -> Any:
            def run() -> tuple[float, int]:
                rehearsal = Rehearsal(payloads=payloads)
                seconds, extra = _peak_extra(functools.partial(rehearsal.run, writer, checkpoint()))
                assert rehearsal.error is None, rehearsal.error
                rehearsal.loaded = None  # what it read back goes before the next side
                gc.collect()
                return seconds, extra

            return run

        times = interleaved({"check": side(False), "payload": side(True)}, reps)
        for name, runs in times.items():
            seconds = summary([r[0] for r in runs])["median"]
            extra = summary([r[1] for r in runs])["median"]
            key = "" if name == "check" else "payload_"
            figures[f"large_{key}extra_share_{stage}"] = extra / ckpt_bytes
            figures[f"large_{key}s_{stage}"] = seconds
            print(
                f"{stage:8s} checkpoint {ckpt_bytes / 2**20:8.1f} MiB; "
                f"{'step-0 check' if name == 'check' else 'with payloads'}: "
                f"+{extra / 2**20:8.1f} MiB peak ({extra / ckpt_bytes:.2%} of the checkpoint), "
                f"{seconds:.3f} s"
            )
        figures[f"large_ckpt_mib_{stage}"] = ckpt_bytes / 2**20
    return figures


if __name__ == "__main__":
    main()
