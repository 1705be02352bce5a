"""The three sides benchmarks/pace.py compares (parts overhead, epoch, throughput), each timed by
the harness's one step clock (harness.StepClock): trainwell as a user runs it (`run_trainwell`,
timed from inside by `FitTimer`), bare Lightning (`run_bare`) and the hand-written loop
(`run_raw`). All three are built from the same config (`build_from_config`: seed, datamodule and
its loaders, net, optimizer at the plan's LR and per-step schedule, precision, channels_last,
compile), so a ratio between them measures the code around the same arithmetic.

**trainwell.** `FitTimer`, a callback, times a real trainwell fit from inside, so nothing else
has to change: benchmarks add it through the config
(`+callbacks.bench_timer._target_=loops.FitTimer`), so the Trainer under test is exactly the one
`trainwell.training.run.train` builds. Results land in `FitTimer.last` because Hydra constructs
the instance inside train() where we cannot reach it. `fit_seconds` ends at on_fit_end, which
Lightning calls after the strategy's teardown: the wait for the last background checkpoint write
is included.

**The hand-written loop**: what a user would write without us. zero_grad / forward / loss /
backward / step, nothing else: no logging, no per-step `.item()`. It keeps trainwell's training
semantics so the comparison is apples to apples: exact accumulation (each optimizer step follows
the mean loss over its window's samples, with a short tail window at the epoch end), a scheduler
stepped once per optimizer step, the sampler's epoch set before each epoch (the order trainwell's
loader documents), one validation pass per epoch in eval() under inference_mode, and trainwell's
default checkpoint policy: `last.ckpt` after every epoch and `best.ckpt` when validation accuracy
improved (model, optimizer, scheduler, epoch), each written atomically (temp file + fsync +
rename). `ckpt="background"` (default) writes them the way a careful hand-written loop would not
stall on them: a snapshot on the training thread, the write in a thread; `ckpt="sync"` writes
inline; `ckpt="none"` writes nothing.

**Bare Lightning**: the same model, data path and precision through Lightning's own Trainer with
none of trainwell's callbacks, task or checkpoint IO. It sits between the hand-written loop and
trainwell: raw -> bare is Lightning's share of a gap, bare -> trainwell is ours. It runs:

* a LightningModule as a Lightning user writes it: cross-entropy on the net's logits, nothing
  logged in training, `val/loss` and `val/acc` logged per validation batch (Lightning averages
  them over the epoch, weighted by batch size);
* Lightning's ModelCheckpoint twice, the same policy as the other sides: `best.ckpt` when
  val/acc improved, `last.ckpt` after every epoch; written by Lightning's own checkpoint IO (on
  the training thread, no fsync);
* the CSV logger at trainwell's `trainer.log_every_n_steps`; no progress bar, no model summary,
  no sanity check; `accumulate_grad_batches` as configured (Lightning's own arithmetic).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
import torch.nn.functional as F
from harness import StepClock, timed
from torch import nn
from torch.utils.data import DataLoader

from trainwell.compat import set_sampler_epoch

# --- trainwell ---------------------------------------------------------------------------------


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
            "+callbacks.bench_timer._target_=loops.FitTimer",
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


# --- the hand-written loop ----------------------------------------------------------------------


@dataclass
class RawResult:
    train_loss: float  # sample-weighted mean train loss of the last epoch (trainwell's train/loss)
    val_loss: float  # sample-weighted mean val loss after the last epoch (trainwell's val/loss)
    val_acc: float
    epoch_seconds: list[float] = field(default_factory=list)
    epoch_cpu: list[float] = field(default_factory=list)  # process CPU seconds per epoch
    train_seconds: list[float] = field(default_factory=list)  # per epoch, before validation
    val_seconds: list[float] = field(default_factory=list)  # the validation pass, set-up included
    val_setup_seconds: list[float] = field(default_factory=list)  # pass minus its batches
    ckpt_seconds: list[float] = field(default_factory=list)  # training-thread time in saves
    val_setup_cpu: list[float] = field(default_factory=list)  # the same two, thread CPU time
    ckpt_cpu: list[float] = field(default_factory=list)
    step_seconds: list[list[float]] = field(default_factory=list)  # per epoch: harness.StepClock
    images: int = 0  # training images processed


class EpochCheckpoints:
    """last.ckpt every epoch, best.ckpt when validation accuracy improved: atomic writes, inline
    or (background) from a snapshot in one writer thread."""

    def __init__(self, directory: Path | None, mode: str = "background") -> None:
        if mode not in ("background", "sync", "none"):
            raise ValueError(f"ckpt must be background|sync|none, got {mode}")
        self.directory, self.mode = directory, mode
        self.best = -math.inf
        self._writer = ThreadPoolExecutor(1) if mode == "background" else None
        self._pending: list[Future] = []

    def save(self, state: dict[str, Any], val_acc: float) -> None:
        if self.mode == "none" or self.directory is None:
            return
        names = ["last.ckpt"] + (["best.ckpt"] if val_acc > self.best else [])
        self.best = max(self.best, val_acc)
        for name in names:
            if self._writer is None:
                _write_atomic(state, self.directory / name)
            else:
                snapshot = {k: _clone(v) for k, v in state.items()}
                self._pending.append(
                    self._writer.submit(_write_atomic, snapshot, self.directory / name)
                )

    def close(self) -> None:
        for future in self._pending:
            future.result()
        if self._writer is not None:
            self._writer.shutdown(wait=True)


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def _write_atomic(state: dict[str, Any], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def autocast_for(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Lightning's `bf16-mixed` is torch.autocast(bfloat16) around forward + loss; `32-true` none."""
    if precision == "bf16-mixed":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision in ("32-true", "32"):
        return contextlib.nullcontext()
    raise ValueError(f"raw loop supports 32-true and bf16-mixed, got {precision}")


def window_sizes(loader: DataLoader, accumulate: int) -> list[int]:
    """Samples in each optimizer-step window of one epoch: K batches, the last window shorter."""
    sizes = [len(indices) for indices in loader.batch_sampler]
    return [sum(sizes[i : i + accumulate]) for i in range(0, len(sizes), accumulate)]


def fit(
    net: nn.Module,
    train_loader: DataLoader,
    val_loader: DataLoader | None,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    epochs: int,
    accumulate: int = 1,
    precision: str = "32-true",
    device: torch.device | None = None,
    label_smoothing: float = 0.0,
    max_batches: int | None = None,
    checkpoints: EpochCheckpoints | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> RawResult:
    """`on_batch(i)`: called where Lightning calls on_train_batch_start (a benchmark's probe)."""
    device = device or torch.device("cpu")
    criterion = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
    result = RawResult(math.nan, math.nan, math.nan)
    windows = window_sizes(train_loader, accumulate)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    checkpoints = checkpoints or EpochCheckpoints(None, "none")
    clock = StepClock()
    for epoch in range(epochs):
        start, start_cpu = time.perf_counter(), time.process_time()
        set_sampler_epoch(train_loader, epoch)  # what Lightning does at every epoch start
        net.train()
        loss_sum = torch.zeros((), device=device)
        seen = 0
        clock.epoch()
        for i, (x, y) in enumerate(train_loader):
            if max_batches is not None and i >= max_batches:
                break
            clock.mark()  # where Lightning calls on_train_batch_start: the batch is in hand
            if on_batch is not None:
                on_batch(i)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast_for(precision, device):
                loss = criterion(net(x), y)
            # The window's gradient is the mean over its samples (a short tail window included).
            (loss * (y.shape[0] / windows[i // accumulate])).backward()
            loss_sum += loss.detach().float() * y.shape[0]
            seen += y.shape[0]
            if (i + 1) % accumulate == 0 or i + 1 == len(train_loader):
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        result.train_loss = (loss_sum / max(seen, 1)).item()  # syncs: the epoch's work is done
        result.train_seconds.append(time.perf_counter() - start)
        result.images += seen
        if val_loader is not None:
            val_start, val_cpu = time.perf_counter(), time.thread_time()
            result.val_loss, result.val_acc, batches, batches_cpu = evaluate(
                net, val_loader, criterion, precision, device
            )
            result.val_seconds.append(time.perf_counter() - val_start)
            result.val_setup_seconds.append(result.val_seconds[-1] - batches)
            result.val_setup_cpu.append(time.thread_time() - val_cpu - batches_cpu)
        ckpt_start, ckpt_cpu = time.perf_counter(), time.thread_time()
        state = {"epoch": epoch, "state_dict": net.state_dict()}
        state["optimizer"] = optimizer.state_dict()
        if scheduler is not None:
            state["scheduler"] = scheduler.state_dict()
        checkpoints.save(state, result.val_acc)
        sync()
        result.ckpt_seconds.append(time.perf_counter() - ckpt_start)
        result.ckpt_cpu.append(time.thread_time() - ckpt_cpu)
        result.epoch_seconds.append(time.perf_counter() - start)
        result.epoch_cpu.append(time.process_time() - start_cpu)
    checkpoints.close()
    result.step_seconds = clock.seconds()
    return result


def evaluate(
    net: nn.Module, loader: DataLoader, criterion: nn.Module, precision: str, device: torch.device
) -> tuple[float, float, float, float]:
    """(val loss, val accuracy, seconds inside the batches: first batch in hand -> last done,
    the same in the thread's CPU time)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    net.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    seen = 0
    first = first_cpu = 0.0
    with torch.inference_mode():
        for i, (x, y) in enumerate(loader):
            if i == 0:
                sync()
                first, first_cpu = time.perf_counter(), time.thread_time()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast_for(precision, device):
                logits = net(x)
                loss = criterion(logits, y)
            loss_sum += loss.float() * y.shape[0]
            correct += (logits.argmax(1) == y).sum()
            seen += y.shape[0]
    sync()
    batches, batches_cpu = time.perf_counter() - first, time.thread_time() - first_cpu
    net.train()
    return (loss_sum / seen).item(), (correct.float() / seen).item(), batches, batches_cpu


def label_smoothing(cfg: Any) -> float:
    """The task's label smoothing: the template's tasks declare it; a module that does not (the
    engine's own classifier, tests/owned) smooths nothing."""
    return float(cfg.model.get("label_smoothing", 0.0))


def total_steps(loader: DataLoader, accumulate: int, epochs: int) -> int:
    """Optimizer steps of the run, for the scheduler (Lightning's estimated_stepping_batches)."""
    return math.ceil(len(loader) / accumulate) * epochs


@dataclass
class Built:
    """What `train()` would build from a config, for a side that trains it another way."""

    cfg: Any
    datamodule: Any
    task: Any
    net: nn.Module
    accumulate: int
    precision: str
    plan: Any
    lr: float | None

    def optimization(self, params: Any) -> tuple[torch.optim.Optimizer, Any]:
        """The task's optimizer (at the plan's scaled LR) and per-step schedule for `params`."""
        extra = {} if self.lr is None else {"lr": self.lr}
        optimizer = self.task.optimizer_factory(params=params, **extra)
        scheduler = None
        if self.task.scheduler_factory is not None:
            steps = self.plan.total_optimizer_steps
            scheduler = self.task.scheduler_factory(optimizer=optimizer, total_steps=steps)
        return optimizer, scheduler


def build_from_config(
    overrides: list[str],
    epochs: int,
    tmp: Path,
    device: torch.device | None = None,
    channels_last: bool = False,
) -> Built:
    """Exactly what `train()` would build from the same overrides.

    The same RNG sequence train() uses (seed, datamodule, then the model), the datamodule's own
    loaders, the task's optimizer/scheduler factories with the training plan's total steps and
    (batch-scaled) LR, the resolved precision (and its matmul setting), and `model.compile`
    applied the same way.
    """
    import lightning as L
    from harness import compose
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from trainwell.loading.sharding import install_loader_policy
    from trainwell.training.builders import build_trainer
    from trainwell.training.plan_callback import plan_for
    from trainwell.training.precision import configure_matmul, resolve_precision

    device = device or torch.device("cpu")
    cfg = compose([*overrides, f"trainer.max_epochs={epochs}"], tmp / "raw")
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    dm = instantiate(cfg.data)
    install_loader_policy(dm, seed=int(cfg.seed))  # the loaders train() iterates
    task = instantiate(cfg.model)
    if getattr(dm, "on_device", False):
        dm.device = device  # what the Trainer's root device is on the trainwell side
    dm.setup("fit")
    net, accumulate = task.net.to(device), int(cfg.trainer.accumulate_grad_batches)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    if cfg.model.get("compile", False):
        net.compile()  # in place, as ClassificationTask.configure_model does
    precision = resolve_precision(cfg.trainer.precision, cfg.trainer.accelerator)
    configure_matmul(precision)  # process-wide, as the trainwell side sets it: TF32 alike
    # The Trainer is only read for the plan (accumulation, world size, epochs), never fitted.
    optimizer_cfg, scheduler_cfg = cfg.model.get("optimizer"), cfg.model.get("scheduler")
    plan = plan_for(
        dm.train_dataloader(),
        build_trainer(cfg, logger=False, callbacks=[]),
        task,
        OmegaConf.to_container(cfg.lr_scaling, resolve=True),
        optimizer_cfg.get("lr") if optimizer_cfg is not None else None,
        OmegaConf.to_container(scheduler_cfg, resolve=True) if scheduler_cfg else None,
    )
    return Built(cfg, dm, task, net, accumulate, precision, plan, getattr(plan, "lr", None))


def run_raw(
    overrides: list[str],
    epochs: int,
    tmp: Path,
    device: torch.device | None = None,
    channels_last: bool = False,
    ckpt: str = "background",
) -> dict[str, Any]:
    """This loop on exactly what `train()` would build from the same overrides
    (`build_from_config`)."""
    from harness import timed

    device = device or torch.device("cpu")
    built = build_from_config(overrides, epochs, tmp, device, channels_last)
    dm, net = built.datamodule, built.net

    def go() -> RawResult:
        train_loader, val_loader = dm.train_dataloader(), dm.val_dataloader()
        optimizer, scheduler = built.optimization(net.parameters())
        return fit(
            net, train_loader, val_loader, optimizer, scheduler, epochs, built.accumulate,
            built.precision, device=device,
            label_smoothing=label_smoothing(built.cfg),
            checkpoints=EpochCheckpoints(tmp / "raw" / "checkpoints", ckpt),
        )  # fmt: skip

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    wall, cpu, result = timed(go)
    return {
        "fit_seconds": wall,
        "fit_cpu": cpu,
        "epoch_seconds": result.epoch_seconds,
        "epoch_cpu": result.epoch_cpu,
        "train_seconds": result.train_seconds,
        "val_seconds": result.val_seconds,
        "val_setup_seconds": result.val_setup_seconds,
        "ckpt_seconds": result.ckpt_seconds,
        "val_setup_cpu": result.val_setup_cpu,
        "ckpt_cpu": result.ckpt_cpu,
        "step_seconds": result.step_seconds,
        "images_per_epoch": result.images // max(epochs, 1),
        "peak_memory": torch.cuda.max_memory_allocated() if device.type == "cuda" else 0,
        "train_loss": result.train_loss,
        "val_loss": result.val_loss,
        "net_state": {k: v.detach().clone() for k, v in net.state_dict().items()},
    }


# --- bare Lightning ----------------------------------------------------------------------------


class BareModule(L.LightningModule):
    """What a Lightning user writes around a net: its loss, its metrics, its optimizer."""

    def __init__(self, net: nn.Module, built: Built, label_smoothing: float) -> None:
        super().__init__()
        self.net = net
        self._built = built  # not an nn.Module: kept out of the module tree and the checkpoint
        self.label_smoothing = label_smoothing

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y, label_smoothing=self.label_smoothing)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        self.log("val/loss", loss, batch_size=y.shape[0])
        self.log("val/acc", (logits.argmax(1) == y).float().mean(), batch_size=y.shape[0])

    def configure_optimizers(self) -> Any:
        optimizer, scheduler = self._built.optimization(self.net.parameters())
        if scheduler is None:
            return optimizer
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def run_bare(
    overrides: list[str],
    epochs: int,
    tmp: Path,
    device: torch.device | None = None,
    channels_last: bool = False,
    extra_callbacks: tuple[L.Callback, ...] = (),
) -> dict[str, Any]:
    """One fit of bare Lightning on what `train()` would build from `overrides`; FitTimer's
    figures (the same timer as the trainwell side). `extra_callbacks`: a benchmark's instruments."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    device = device or torch.device("cpu")
    built = build_from_config(overrides, epochs, tmp, device, channels_last)
    cfg = built.cfg
    directory = tmp / "bare"
    module = BareModule(built.net, built, label_smoothing(cfg))
    folder = directory / "checkpoints"
    checkpoints = [  # one file each, replaced in place (no best-v1.ckpt)
        ModelCheckpoint(
            folder, "best", monitor="val/acc", mode="max", enable_version_counter=False
        ),
        ModelCheckpoint(folder, "last", save_on_train_epoch_end=True, enable_version_counter=False),
    ]
    trainer = L.Trainer(
        accelerator=device.type, devices=1, precision=built.precision, max_epochs=epochs,
        accumulate_grad_batches=built.accumulate, num_sanity_val_steps=0,
        log_every_n_steps=int(cfg.trainer.log_every_n_steps),
        logger=CSVLogger(directory), callbacks=[FitTimer(), *checkpoints, *extra_callbacks],
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=directory,
    )  # fmt: skip
    FitTimer.last = {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    wall, _, _ = timed(lambda: trainer.fit(module, datamodule=built.datamodule))
    final = FitTimer.last["state_dict"]
    return {
        **FitTimer.last,
        "train_wall": wall,
        "val_loss": float(trainer.callback_metrics["val/loss"]),
        "net_state": {k[len("net.") :]: v for k, v in final.items() if k.startswith("net.")},
    }
