"""What EMA (`ema.decay`) costs per optimizer step, against the same run without it.

    .venv/bin/python benchmarks/ema_cost.py                     # digits CNN, 4 epochs, 3 reps
    .venv/bin/python benchmarks/ema_cost.py --override model=resnet18 --override data=synthetic

Three sides of `trainwell.training.run.train`, interleaved, identical but for the average: `off`
(ema.decay=null), `ema` (ema.decay=0.999: the template's ExactEMA) and `lightning` (Lightning's
own EMAWeightAveraging(decay=0.999) added as a callback: the same work, done by the stock
callback). Figures: the host time per optimizer step (process CPU time from each training
batch's start to its end, epochs after the first: forward, backward, optimizer step and the
update; CPU time because neighbours on a shared machine stretch wall time far more) of each
side, as ratios to `off`; and the time inside the averaging callback's per-batch hook (the
update) per optimizer step, as a share of `off`'s step.

A second figure isolates the update itself: one update of the run's module by the template's
average (one fused foreach lerp, the count on the host) and by torch's AveragedModel with the
per-tensor EMA function Lightning's callback passes it, each timed over many repetitions on the
same module.

Last line: `ema_step_ratio=.. lightning_step_ratio=.. ema_hook_share=.. lightning_hook_share=..
ema_update_ms=.. lightning_update_ms=.. tensors=.. off_step_ms=..` (and each side's figures).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import harness
import lightning as L

DECAY = 0.999
SIDES: dict[str, list[str]] = {
    "off": [],
    "ema": [f"ema.decay={DECAY}"],
    "lightning": [
        "+callbacks.stock_ema._target_=lightning.pytorch.callbacks.EMAWeightAveraging",
        f"+callbacks.stock_ema.decay={DECAY}",
    ],
}


class HookClock:
    """Process CPU seconds inside the averaging callbacks' per-batch hook (the update), summed
    over a fit: patched onto Lightning's WeightAveraging for the benchmark's lifetime."""

    seconds = 0.0

    @classmethod
    def install(cls) -> None:
        # The template's ExactEMA inherits this hook: patched once, it times both sides.
        from lightning.pytorch.callbacks import WeightAveraging

        hook = WeightAveraging.on_train_batch_end

        def timed(self: Any, *args: Any, **kwargs: Any) -> None:
            start = time.process_time()
            try:
                hook(self, *args, **kwargs)
            finally:
                cls.seconds += time.process_time() - start

        WeightAveraging.on_train_batch_end = timed  # type: ignore[method-assign]


class StepClock(L.Callback):
    """Process CPU seconds of every training batch, from its start to its end (forward,
    backward, optimizer step and the averaging update, which runs before this hook; not the
    data loading, validation or checkpoint writes): the host's time per step, which neighbours
    on a shared machine stretch far less than wall time. Built by Hydra inside train()."""

    last: ClassVar[list[float]] = []

    def __init__(self) -> None:
        self.batches: list[float] = []
        self._start = 0.0
        StepClock.last = self.batches

    def on_train_batch_start(self, *args: Any) -> None:
        self._start = time.process_time()

    def on_train_batch_end(self, *args: Any) -> None:
        self.batches.append(time.process_time() - self._start)


def step_seconds(side: str, epochs: int, extra: list[str], out: Path) -> tuple[float, float]:
    """(host CPU seconds per optimizer step, of them in the averaging hook) of one train() call,
    the first epoch left out (warm-up)."""
    # The class Hydra builds (module `ema_cost`), which is not `__main__`'s when run as a script.
    from ema_cost import StepClock as Built

    from trainwell.training.run import train

    HookClock.seconds = 0.0
    overrides = [
        *extra,
        *SIDES[side],
        f"trainer.max_epochs={epochs}",
        "test=false",
        "print_config=false",
        "callbacks.early_stopping=null",
        "callbacks.rich_progress_bar=null",
        "+callbacks.step_clock._target_=ema_cost.StepClock",
    ]
    results = train(harness.compose(overrides, out))
    steps = int(results["finished_at"]["global_step"])
    batches = Built.last
    later = batches[len(batches) // epochs :] if epochs > 1 else batches
    per_step = sum(later) / max(1, round(steps * len(later) / len(batches)))
    return per_step, HookClock.seconds / max(steps, 1)


def update_seconds(extra: list[str], reps: int) -> dict[str, Any]:
    """Seconds per update of the run's module: the template's average and AveragedModel with
    Lightning's per-tensor EMA function, alternating."""
    import torch
    from hydra.utils import instantiate
    from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn

    from trainwell.compat.averaging import PlacedAverage

    with tempfile.TemporaryDirectory() as tmp:
        module = instantiate(harness.compose(extra, Path(tmp)).model)
    placed = PlacedAverage(module, DECAY)
    stock = AveragedModel(module, avg_fn=get_ema_avg_fn(DECAY), use_buffers=True)
    times: dict[str, list[float]] = {"ema": [], "lightning": []}
    with torch.no_grad():
        for _ in range(reps):
            for name, average in (("ema", placed), ("lightning", stock)):
                start = time.perf_counter()
                for _ in range(10):
                    average.update_parameters(module)
                times[name].append((time.perf_counter() - start) / 10)
    tensors = len(list(module.parameters())) + len(list(module.buffers()))
    return {name: statistics.median(values) for name, values in times.items()} | {
        "tensors": tensors
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--override", action="append", default=[], help="a train.py override")
    args = harness.parse_args(
        parser, argv, lambda a: f"EMA cost per optimizer step: {' '.join(a.override) or 'digits'}"
    )
    sys.path.insert(0, str(harness.REPO / "benchmarks"))  # ema_cost.StepClock, built by name
    HookClock.install()
    with tempfile.TemporaryDirectory(prefix="tw-bench-ema-") as tmp:

        def side(name: str) -> tuple[float, float]:
            return step_seconds(name, args.epochs, args.override, Path(tempfile.mkdtemp(dir=tmp)))

        def report(rep: int, results: dict[str, tuple[float, float]]) -> None:
            line = ", ".join(
                f"{k}: {1e3 * v[0]:.3f} ms/step ({1e3 * v[1]:.3f} in the update hook)"
                for k, v in results.items()
            )
            print(f"rep {rep}: {line}", flush=True)

        runs = harness.interleaved({k: (lambda k=k: side(k)) for k in SIDES}, args.reps, report)
    update = update_seconds(args.override, reps=max(5, 5 * args.reps))
    figures: dict[str, float | int | str] = {}
    times = {k: [step for step, _ in v] for k, v in runs.items()}
    hooks = {k: [hook for _, hook in v] for k, v in runs.items()}
    medians = {k: harness.summary(v)["median"] for k, v in times.items()}
    for name in SIDES:
        harness.figure(
            figures,
            f"{name}_step_ms",
            [1e3 * t for t in times[name]],
            f"{name}: per step",
            " ms",
            spread=True,
        )
    for name in ("ema", "lightning"):
        harness.figure(
            figures,
            f"{name}_hook_ms",
            [1e3 * t for t in hooks[name]],
            f"{name}: hook per step",
            " ms",
        )
    print(
        f"one update of {update['tensors']} tensors: template {1e3 * update['ema']:.3f} ms, "
        f"Lightning's {1e3 * update['lightning']:.3f} ms"
    )
    harness.final_line(
        ema_step_ratio=medians["ema"] / medians["off"],
        lightning_step_ratio=medians["lightning"] / medians["off"],
        ema_hook_share=figures["ema_hook_ms"] / figures["off_step_ms"],  # type: ignore[operator]
        lightning_hook_share=figures["lightning_hook_ms"] / figures["off_step_ms"],  # type: ignore[operator]
        ema_update_ms=1e3 * update["ema"],
        lightning_update_ms=1e3 * update["lightning"],
        tensors=update["tensors"],
        **figures,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
