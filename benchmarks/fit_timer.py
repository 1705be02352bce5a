"""A callback that times a real `trainwell` fit from inside, so nothing else has to change.

Benchmarks add it through the config (`+callbacks.bench_timer._target_=fit_timer.FitTimer`), so
the Trainer under test is exactly the one `trainwell.training.run.train` builds. Results land in
`FitTimer.last` because Hydra constructs the instance inside train() where we cannot reach it.
`fit_seconds` ends at on_fit_end, which Lightning calls after the strategy's teardown: the wait
for the last background checkpoint write is included.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from harness import StepClock


def _sync() -> None:
    # CUDA runs asynchronously: without a sync an epoch "ends" before its kernels do.
    # (is_initialized alone: is_available asks the driver, ~1 ms a call on a CPU-only machine.)
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


class FitTimer(L.Callback):
    """Wall and process CPU time of fit (setup hook -> on_fit_end) and of every epoch, split into
    its parts.

    An epoch runs from one `on_train_epoch_start` to the next (the last one to `on_train_end`),
    so the checkpoints Lightning writes after `on_train_epoch_end` count in the epoch they end.
    Per epoch: `train_seconds` (epoch start -> validation start), `val_seconds` (validation start
    -> end), `val_setup_seconds` (validation minus its batches: loader iterator, mode switches,
    metric compute), `ckpt_seconds` (time the training thread spends in trainer.save_checkpoint),
    `step_seconds` (every training step, harness.StepClock).
    On a GPU each boundary synchronises, which costs a few syncs per epoch, none per step.

    CPU time is the robust figure on a shared machine: neighbours stretch wall time, not the CPU
    seconds this process spends (it misses I/O waits such as fsync, which wall time shows)."""

    last: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self.fit_start = self.fit_start_cpu = 0.0
        self.epoch_start = self.epoch_start_cpu = 0.0
        self.epochs: list[float] = []
        self.epochs_cpu: list[float] = []
        self.train_seconds: list[float] = []  # train part of each epoch (before validation)
        self.val_seconds: list[float] = []
        self.val_setup_seconds: list[float] = []
        self.ckpt_seconds: list[float] = []
        # The same two parts in the training thread's CPU time (time.thread_time): robust when
        # neighbours load the machine; blind to waits (a pending write, the GIL, I/O).
        self.val_setup_cpu: list[float] = []
        self.ckpt_cpu: list[float] = []
        self.train_batches = 0
        self.steps = StepClock()
        self._in_epoch = False
        self._val_start = self._val_first = self._val_last = 0.0
        self._val_cpu = (0.0, 0.0, 0.0)  # thread CPU at validation start, first batch, last

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self.fit_start, self.fit_start_cpu = time.perf_counter(), time.process_time()
        self.steps = StepClock()
        save = trainer.save_checkpoint

        def timed_save(*args: Any, **kwargs: Any) -> Any:
            _sync()
            start, start_cpu = time.perf_counter(), time.thread_time()
            try:
                return save(*args, **kwargs)
            finally:
                _sync()
                if self._in_epoch and self.ckpt_seconds:
                    self.ckpt_seconds[-1] += time.perf_counter() - start
                    self.ckpt_cpu[-1] += time.thread_time() - start_cpu

        trainer.save_checkpoint = timed_save  # type: ignore[method-assign]  # this instance only

    def _close_epoch(self) -> None:
        if not self._in_epoch:
            return
        _sync()
        now = time.perf_counter()
        if len(self.train_seconds) < len(self.ckpt_seconds):  # no validation ran this epoch
            self.train_seconds.append(now - self.epoch_start)
        self.epochs.append(now - self.epoch_start)
        self.epochs_cpu.append(time.process_time() - self.epoch_start_cpu)
        self._in_epoch = False

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close_epoch()
        _sync()
        self.epoch_start, self.epoch_start_cpu = time.perf_counter(), time.process_time()
        self.ckpt_seconds.append(0.0)
        self.ckpt_cpu.append(0.0)
        self._in_epoch = True
        self.steps.epoch()

    def on_train_batch_start(self, *args: Any) -> None:
        self.steps.mark()

    def on_train_batch_end(self, *args: Any) -> None:
        self.train_batches += 1

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not self._in_epoch:
            return
        _sync()
        self._val_start = self._val_first = time.perf_counter()
        now_cpu = time.thread_time()
        self._val_cpu = (now_cpu, now_cpu, now_cpu)
        self.train_seconds.append(self._val_start - self.epoch_start)

    def on_validation_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if not trainer.sanity_checking and self._val_first == self._val_start:
            _sync()
            self._val_first = time.perf_counter()
            self._val_cpu = (self._val_cpu[0], time.thread_time(), time.thread_time())

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        if trainer.sanity_checking:
            return
        if batch_idx + 1 == trainer.num_val_batches[dataloader_idx]:
            _sync()  # the last batch: its kernels are done when the clock is read
        self._val_last = time.perf_counter()
        self._val_cpu = (*self._val_cpu[:2], time.thread_time())

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not self._in_epoch:
            return
        _sync()
        now = time.perf_counter()
        self.val_seconds.append(now - self._val_start)
        # The batches' time: first batch in hand -> last batch done; set-up is the rest.
        batches = max(self._val_last, self._val_first) - self._val_first
        self.val_setup_seconds.append(self.val_seconds[-1] - batches)
        start, first, last = self._val_cpu
        self.val_setup_cpu.append(time.thread_time() - start - (max(last, first) - first))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close_epoch()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _sync()
        FitTimer.last = {
            "fit_seconds": time.perf_counter() - self.fit_start,
            "fit_cpu": time.process_time() - self.fit_start_cpu,
            "epoch_seconds": list(self.epochs),
            "epoch_cpu": list(self.epochs_cpu),
            "train_seconds": list(self.train_seconds),
            "val_seconds": list(self.val_seconds),
            "val_setup_seconds": list(self.val_setup_seconds),
            "ckpt_seconds": list(self.ckpt_seconds),
            "val_setup_cpu": list(self.val_setup_cpu),
            "ckpt_cpu": list(self.ckpt_cpu),
            "step_seconds": self.steps.seconds(),
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
