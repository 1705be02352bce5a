"""ThroughputLogger: training samples/s (items/s for token-level losses), FLOP/s and MFU, logged
every logging interval without making the host wait for the GPU.

Lightning's ThroughputMonitor calls `torch.cuda.synchronize()` after every training batch so its
host clock is right: on a fast GPU that empties the launch queue at every step. Here the clock is
the GPU's own: a CUDA event recorded at each logging step, read once a later one has completed
(`query()`, which never waits), so the figure logged at a step covers an interval that ended one
logging interval earlier. On the CPU the host clock is exact and nothing lags.

The arithmetic is Lightning's `Throughput` (rolling window, per device and, with several ranks,
global), MFU against `get_available_flops` for the device and the precision's compute dtype
(the dense tensor-core peak: TF32 for fp32 matmuls when allowed, bf16, fp16). No peak is known for
CPUs, so there MFU is absent and FLOP/s alone is logged.

FLOPs: the module's `flops_per_batch` attribute when it has one (Lightning's convention), else
counted with torch's FlopCounterMode during the first training micro-batch of a fresh run (forward
+ backward; recomputation under gradient checkpointing included), assumed proportional to the batch
size, and kept in checkpoints so a resumed run does not count again. A compiled module runs that one
micro-batch eagerly (the counter cannot see inside compiled kernels). With sharded (FSDP2)
parameters nothing is counted: declare `flops_per_batch` there.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.throughput import Throughput, get_available_flops
from lightning.pytorch.utilities import rank_zero_info
from torch.distributed.tensor import DTensor

from trainwell.callbacks.accumulation import ITEMS_HOOK, count_items
from trainwell.callbacks.cadence import is_reading_step
from trainwell.loading.batch_size import batch_size

_COMPUTE_DTYPES = {
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "16-mixed": torch.float16,
    "16-true": torch.float16,
    "64-true": torch.float64,
}


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype the matmuls of `trainer.precision` run in (the peak MFU is measured against)."""
    return _COMPUTE_DTYPES.get(str(precision), torch.float32)


class _Mark:
    """Cumulative counts at one logging step, and when the device got there."""

    def __init__(self, samples: int, batches: int, flops: float, items: Any, device: torch.device):
        self.samples, self.batches, self.flops = samples, batches, flops
        self.items: Any = items
        self.event: torch.cuda.Event | None = None
        self.host_time = time.perf_counter()
        if isinstance(items, torch.Tensor) and items.device.type == "cuda":
            # Copied to pinned memory before the event: valid, without a wait, once it completed.
            pinned = torch.empty((), dtype=items.dtype, pin_memory=True)
            self.items = pinned.copy_(items, non_blocking=True)
        elif isinstance(items, torch.Tensor):
            self.items = items.clone()
        if device.type == "cuda":
            self.event = torch.cuda.Event(enable_timing=True)
            self.event.record()

    def done(self) -> bool:
        return self.event is None or self.event.query()

    def seconds_since(self, first: _Mark) -> float:
        if self.event is not None and first.event is not None:
            return first.event.elapsed_time(self.event) / 1000.0
        return self.host_time - first.host_time


class ThroughputLogger(L.Callback):
    """Logs `throughput/samples_per_sec`, `throughput/items_per_sec` (modules that declare
    `loss_items`: tokens, masked positions), `throughput/flops_per_sec` and `throughput/mfu`
    (per device) every `every_n_steps` optimizer steps (default `trainer.log_every_n_steps`),
    each over the last `window` logging intervals of the current epoch (validation and
    checkpoints between epochs are not counted)."""

    def __init__(
        self, every_n_steps: int | None = None, window: int = 1, count_flops: bool = True
    ) -> None:
        super().__init__()
        self.every_n_steps = every_n_steps
        self.window = max(1, window)
        self.count_flops = count_flops
        self.flops_per_sample: float | None = None
        self.available_flops: int | None = None
        self._samples = self._batches = 0
        self._flops = 0.0
        self._items: int | torch.Tensor = 0
        self._marks: deque[_Mark] = deque()
        self._origin: _Mark | None = None  # the epoch's first logging step the device reached
        self._previous: _Mark | None = None
        self._item_window: deque[tuple[float, float]] = deque(maxlen=self.window + 1)
        self._throughput: Throughput | None = None
        self._counter: contextlib.ExitStack | None = None
        self._counting: Any = None
        self._counted_batch = 0
        # The module's declarations (flops_per_batch, loss_items), read at the first batch of
        # each epoch the loop runs: a missing attribute costs nn.Module.__getattr__ an exception
        # at every batch.
        self._declared: tuple[float | None, bool] | None = None

    # -- set-up ----------------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        device = trainer.strategy.root_device
        self.available_flops = get_available_flops(device, compute_dtype(trainer.precision))
        if self.available_flops is None:
            rank_zero_info(f"throughput: no peak FLOP/s known for {device}: MFU is not logged")

    def state_dict(self) -> dict[str, Any]:
        return {"flops_per_sample": self.flops_per_sample}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.flops_per_sample = state_dict.get("flops_per_sample")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._declared = None  # a mid-epoch resume starts no epoch: read them again all the same

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._declared = None
        self._marks.clear()
        self._item_window.clear()
        self._origin = self._previous = None
        self._throughput = Throughput(
            available_flops=self.available_flops,
            world_size=trainer.world_size,
            window_size=self.window + 1,
            separator="/",
        )

    # -- per micro-batch (host arithmetic only) --------------------------------------------------
    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._should_count(trainer, pl_module):
            from torch.utils.flop_counter import FlopCounterMode

            self._counter = contextlib.ExitStack()
            # The counter sees only eager ops: a compiled module runs this one batch eagerly.
            self._counter.enter_context(torch.compiler.set_stance("force_eager"))
            self._counting = self._counter.enter_context(FlopCounterMode(display=False))
            self._counted_batch = batch_size(batch)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._counter is not None:
            self._counter.close()
            self._counter = None
            total = self._counting.get_total_flops()
            self.flops_per_sample = total / max(self._counted_batch, 1) if total else None
            if not self.flops_per_sample:
                rank_zero_info("throughput: FlopCounterMode counted no FLOPs: MFU is not logged")
        samples = batch_size(batch)
        self._samples += samples
        self._batches += 1
        if self._declared is None:
            flops = getattr(pl_module, "flops_per_batch", None)
            self._declared = (
                None if flops is None else float(flops),
                callable(getattr(pl_module, ITEMS_HOOK, None)),
            )
        declared, counts_items = self._declared
        if declared is not None:
            self._flops += declared
        elif self.flops_per_sample:
            self._flops += self.flops_per_sample * samples
        if counts_items:
            self._items = self._items + count_items(pl_module, batch, batch_idx)
        if is_reading_step(trainer, batch_idx + 1, self.every_n_steps):
            self._mark_and_log(trainer)

    def _should_count(self, trainer: L.Trainer, pl_module: L.LightningModule) -> bool:
        if not (
            self.count_flops
            and self.flops_per_sample is None
            and getattr(pl_module, "flops_per_batch", None) is None
            and trainer.global_step == 0
            and self._batches == 0
        ):
            return False
        if any(isinstance(p, DTensor) for p in pl_module.parameters()):
            # Sharded parameters: the counter would see the DTensor ops, not this rank's share.
            rank_zero_info("throughput: sharded parameters: set `flops_per_batch` for FLOP/s, MFU")
            self.count_flops = False
            return False
        return True

    # -- at logging steps ------------------------------------------------------------------------
    def _mark_and_log(self, trainer: L.Trainer) -> None:
        device = trainer.strategy.root_device
        self._marks.append(_Mark(self._samples, self._batches, self._flops, self._items, device))
        computed: dict[str, float] = {}
        # Every mark the device has reached, oldest first (on the CPU: all of them, at once).
        while self._marks and self._marks[0].done() and self._throughput is not None:
            mark = self._marks.popleft()
            if self._origin is None:
                self._origin = self._previous = mark
            assert self._previous is not None
            seconds = mark.seconds_since(self._origin)
            self._throughput.update(
                time=seconds,
                batches=mark.batches,
                samples=mark.samples,
                flops=mark.flops - self._previous.flops,
            )
            self._item_window.append((seconds, float(mark.items)))
            self._previous = mark
            computed = self._throughput.compute()
        if computed:
            self._log(trainer, computed)

    def _log(self, trainer: L.Trainer, computed: dict[str, float]) -> None:
        metrics: dict[str, float] = {}
        device_rate = computed.get("device/samples_per_sec")
        if device_rate is not None:
            metrics["throughput/samples_per_sec"] = computed.get("samples_per_sec", device_rate)
        (t0, items0), (t1, items1) = self._item_window[0], self._item_window[-1]
        if items1 > items0 and t1 > t0 and len(self._item_window) == self._item_window.maxlen:
            metrics["throughput/items_per_sec"] = (items1 - items0) / (t1 - t0) * trainer.world_size
        # No FLOPs counted or declared (sharded parameters, a counter that saw none): Lightning
        # still computes 0 FLOP/s and 0 MFU; logged, they would read as a measurement.
        if computed.get("device/flops_per_sec"):
            metrics["throughput/flops_per_sec"] = computed["device/flops_per_sec"]
            if "device/mfu" in computed:
                metrics["throughput/mfu"] = computed["device/mfu"]
        if not metrics:
            return
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
