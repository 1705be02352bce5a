"""A callback that times a real `trainwell` fit from inside, so nothing else has to change.

Benchmarks add it through the config (`+callbacks.bench_timer._target_=fit_timer.FitTimer`), so
the Trainer under test is exactly the one `trainwell.training.run.train` builds. Results land in
`FitTimer.last` because Hydra constructs the instance inside train() where we cannot reach it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch


def _sync() -> None:
    # CUDA runs asynchronously: without a sync an epoch "ends" before its kernels do.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class FitTimer(L.Callback):
    """Wall and process CPU time of fit (setup hook -> on_fit_end) and of every train+val epoch.

    CPU time is the robust figure on a shared machine: neighbours stretch wall time, not the CPU
    seconds this process spends (it misses I/O waits such as fsync, which wall time shows)."""

    last: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self.fit_start = self.fit_start_cpu = 0.0
        self.epoch_start = self.epoch_start_cpu = 0.0
        self.epochs: list[float] = []
        self.epochs_cpu: list[float] = []
        self.train_seconds: list[float] = []  # train part of each epoch (before validation)
        self.train_batches = 0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self.fit_start, self.fit_start_cpu = time.perf_counter(), time.process_time()

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _sync()
        self.epoch_start, self.epoch_start_cpu = time.perf_counter(), time.process_time()

    def on_train_batch_end(self, *args: Any) -> None:
        self.train_batches += 1

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking and len(self.train_seconds) == len(self.epochs):
            _sync()
            self.train_seconds.append(time.perf_counter() - self.epoch_start)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning 2.x calls this after the epoch's validation pass (and its checkpoint save).
        _sync()
        now = time.perf_counter()
        if len(self.train_seconds) == len(self.epochs):  # no validation ran this epoch
            self.train_seconds.append(now - self.epoch_start)
        self.epochs.append(now - self.epoch_start)
        self.epochs_cpu.append(time.process_time() - self.epoch_start_cpu)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _sync()
        FitTimer.last = {
            "fit_seconds": time.perf_counter() - self.fit_start,
            "fit_cpu": time.process_time() - self.fit_start_cpu,
            "epoch_seconds": list(self.epochs),
            "epoch_cpu": list(self.epochs_cpu),
            "train_seconds": list(self.train_seconds),
            "peak_memory": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0,
            "train_batches": self.train_batches,
            # The final weights in memory: last.ckpt is not them when the final epoch did not
            # improve the monitored metric (Lightning 2.6 writes last.ckpt only next to a top-k save).
            "state_dict": {k: v.detach().cpu().clone() for k, v in pl_module.state_dict().items()},
        }


class ChannelsLast(L.Callback):
    """Benchmark-only: the model in channels_last memory format (NHWC convolutions on tensor
    cores). Inputs stay NCHW on both sides of the comparison; the first conv converts."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        pl_module.to(memory_format=torch.channels_last)


def run_trainwell(overrides: list[str], epochs: int, tmp: Path) -> dict[str, Any]:
    """`trainwell.training.run.train` itself (test=false) with this timer added by config."""
    from harness import compose, timed

    from trainwell.training.run import train

    cfg = compose(
        [
            *overrides,
            f"trainer.max_epochs={epochs}",
            "print_config=false",
            "test=false",
            "+callbacks.bench_timer._target_=fit_timer.FitTimer",
        ],
        tmp / "trainwell",
    )
    FitTimer.last = {}
    wall, _, results = timed(lambda: train(cfg))
    final = FitTimer.last["state_dict"]
    return {
        **FitTimer.last,
        "train_wall": wall,
        "train_loss": results["metrics"]["train/loss"],
        "val_loss": results["metrics"]["val/loss"],
        "net_state": {k[len("net.") :]: v for k, v in final.items() if k.startswith("net.")},
    }
