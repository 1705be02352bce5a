"""Pace: trainwell against bare Lightning and the hand-written loop, per step, per epoch and over
a whole fit. One runner, one part per figure set, on the harness (one opening, interleaved sides,
one last line, harness.StepClock for every step time). `overhead`, `epoch` and `throughput` run
benchmarks/loops.py's three sides; `host` runs its own near-zero-compute sides (Lightning as
users run it among them), so that a step's Python is all there is to see.

    .venv/bin/python benchmarks/pace.py overhead    # P1  trainwell vs a hand-written loop (CPU)
    .venv/bin/python benchmarks/pace.py host        # host (Python) cost per training step vs Lightning
    .venv/bin/python benchmarks/pace.py epoch       # per-epoch checkpoint + validation set-up, 90 MB state
    .venv/bin/python benchmarks/pace.py throughput  # P2  img/s, MFU, the gap split (GPU; CPU smoke)
    .venv/bin/python benchmarks/pace.py throughput --ops  # op parity: a step's operations beyond the raw loop's

`PART -h` says what a part measures and which figures its last line prints.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

if __name__ == "__main__":
    # Hydra builds this runner's callbacks and datamodules by name (`pace.StepTimer`,
    # `pace.OpWindow`, ...): make that name this very module, so their results land where the
    # part reads them.
    sys.modules.setdefault("pace", sys.modules["__main__"])
    if sys.argv[1:2] == ["host"]:
        # The host part measures one thread's Python: OpenMP's pool too, before torch starts it.
        os.environ.setdefault("OMP_NUM_THREADS", "1")

import harness
import lightning as L
import loops
import torch
import torch.nn.functional as F
from harness import compose, figure, interleaved
from hydra.utils import instantiate
from omegaconf import OmegaConf, open_dict
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

CUDA = torch.cuda.is_available()
Figures = dict[str, float | int | str]


def weight_difference(a: dict, b: dict) -> float:
    """Largest |difference| between the two runs' final floating-point weights."""
    diffs = [0.0]
    for key, value in a["net_state"].items():
        if value.is_floating_point():
            other = b["net_state"][key].to(value.device)
            diffs.append((value.float() - other.float()).abs().max().item())
    return max(diffs)


# --- overhead ----------------------------------------------------------------------------------

WORKLOADS = {
    # the default experiment: digits + DigitsCNN, AdamW, warmup-cosine
    "digits": harness.DIGITS_CONSTANT_LR,
    # experiment=resnet_accum (SGD nesterov, micro-batch x K=4) on small synthetic data
    "resnet18": harness.Workload(
        "the ResNet-18 example",
        (
            "experiment=resnet_accum",
            "data=synthetic",
            "data.num_samples=384",
            "data.num_val=128",
            "data.num_test=64",
            "data.batch_size=32",
            "model.net.width=16",
        ),
        (*harness.RESNET, *harness.SYNTHETIC),
    ),
}
TOLERANCE = 1e-5


def agreement(a: dict, b: dict) -> float:
    """Largest absolute difference in final losses and weights between the two sides."""
    losses = [abs(a["train_loss"] - b["train_loss"]), abs(a["val_loss"] - b["val_loss"])]
    return max(*losses, weight_difference(a, b))


def steady(epochs: list[float]) -> float:
    """Median epoch time after the first (the first pays one-off costs on both sides)."""
    return statistics.median(epochs[1:] if len(epochs) > 1 else epochs)


def overhead_workload(
    name: str, epochs: int, reps: int, tw_extra: list[str], raw_ckpt: str = "background"
) -> Figures:
    overrides = harness.resolve(WORKLOADS[name])
    if overrides is None:
        print(harness.skip_line(f"workload {name!r}", harness.missing(WORKLOADS[name].needs)))
        return {}

    def run_raw() -> dict:
        with tempfile.TemporaryDirectory(prefix="tw-bench-") as tmp:
            return loops.run_raw(overrides, epochs, Path(tmp), ckpt=raw_ckpt)

    def run_tw() -> dict:
        with tempfile.TemporaryDirectory(prefix="tw-bench-") as tmp:
            return loops.run_trainwell([*overrides, *tw_extra], epochs, Path(tmp))

    def report(rep: int, runs: dict[str, dict]) -> None:
        raw, tw = runs["raw"], runs["tw"]
        print(
            f"[{name} rep {rep}] wall: raw {raw['fit_seconds']:.3f}s trainwell fit "
            f"{tw['fit_seconds']:.3f}s (whole train() {tw['train_wall']:.3f}s); cpu: raw "
            f"{raw['fit_cpu']:.3f}s trainwell {tw['fit_cpu']:.3f}s; ratio "
            f"{tw['fit_seconds'] / raw['fit_seconds']:.3f} cpu_ratio "
            f"{tw['fit_cpu'] / raw['fit_cpu']:.3f} max|diff| {agreement(tw, raw):.2e}",
            flush=True,
        )

    runs = interleaved({"raw": run_raw, "tw": run_tw}, reps, report)
    pairs = list(zip(runs["raw"], runs["tw"], strict=True))
    figures: Figures = {}
    raw_s = [raw["fit_seconds"] / epochs for raw, _ in pairs]
    tw_s = [tw["fit_seconds"] / epochs for _, tw in pairs]
    label = f"{name} raw loop s/epoch (train + val)"
    harness.figure(figures, f"{name}_s_per_epoch_raw", raw_s, label, "s")
    print(
        harness.describe(f"{name} trainwell s/epoch (fit incl. sanity check, val, ckpt)", tw_s, "s")
    )
    ratios = {
        "ratio: fit wall / raw wall": [tw["fit_seconds"] / raw["fit_seconds"] for raw, tw in pairs],
        "cpu_ratio: fit CPU / raw CPU": [tw["fit_cpu"] / raw["fit_cpu"] for raw, tw in pairs],
        "epoch_ratio: steady-state epoch wall": [
            steady(tw["epoch_seconds"]) / steady(raw["epoch_seconds"]) for raw, tw in pairs
        ],
        "epoch_cpu_ratio: steady-state epoch CPU": [
            steady(tw["epoch_cpu"]) / steady(raw["epoch_cpu"]) for raw, tw in pairs
        ],
    }
    for label, values in ratios.items():
        key = label.split(":")[0]
        harness.figure(figures, f"{name}_{key}", values, f"{name} {label}", spread=True)
    for side, label in (("tw", "trainwell"), ("raw", "raw loop")):
        costs = [harness.fixed_costs(run) for run in runs[side]]
        for cost in costs[0]:
            values = [c[cost] for c in costs]
            harness.figure(
                figures, f"{name}_{side}_{cost}", values, f"{name} {label} per-epoch {cost}", " ms"
            )
    worst = max(agreement(tw, raw) for raw, tw in pairs)
    print(f"{name} max |final loss / weight difference| = {worst:.2e} (tolerance {TOLERANCE})")
    if worst > TOLERANCE:
        print(f"{name}: WARNING the two sides disagree beyond {TOLERANCE}: not apples to apples")
    figures[f"{name}_maxdiff"] = worst
    return figures


def overhead_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", choices=[*WORKLOADS, "all"], default="all")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--raw-ckpt",
        choices=["background", "sync", "none"],
        default="background",
        help="how the raw loop writes its per-epoch checkpoints (trainwell: background)",
    )
    parser.add_argument(
        "--tw-override",
        action="append",
        default=[],
        help="extra Hydra override for the trainwell side only, to find what costs time "
        "(e.g. --tw-override=~callbacks.rich_progress_bar); repeatable",
    )


def run_overhead(args: argparse.Namespace) -> Figures:
    """P1: wall time of trainwell (default callbacks, guards, csv logger) over a hand-written loop.

        .venv/bin/python benchmarks/pace.py overhead                # digits + resnet18, 3 reps
        .venv/bin/python benchmarks/pace.py overhead --workload digits --epochs 5 --reps 5

    Apples to apples: both sides get the same seed before the same model init, the same
    datamodule's train loader (same tensors, same order), the same optimizer and scheduler from
    the config, the same precision and accumulation, one validation pass per epoch (trainwell's
    ModelCheckpoint and EarlyStopping monitor val/acc, so "no validation" is not what a user
    runs), and the same checkpoint policy: last.ckpt after every epoch, best.ckpt when val
    accuracy improved, atomic (temp + fsync + rename), written from a snapshot by a background
    thread on both sides (`--raw-ckpt sync` makes the raw loop write inline, `none` not at all).
    The trainwell side is `trainwell.training.run.train` itself (test=false), timed from its
    Trainer's setup hook to on_fit_end (after the last checkpoint write finished), so its sanity
    check and logging count. Final losses and weights must agree to 1e-5 (CPU fp32 is
    deterministic), which proves both sides did the same arithmetic.

    Figures (median of interleaved repetitions, with spread = half-range / median):
      ratio            fit wall time / raw wall time (<= 1.03 is the target)
      cpu_ratio        the same in process CPU seconds (robust when neighbours load the machine,
                       blind to I/O waits such as checkpoint fsync)
      epoch_ratio      steady-state epoch (2nd epoch on, checkpoints included), wall;
                       epoch_cpu_ratio the same in CPU
      fixed_ms         per-epoch fixed cost, each side: epoch - training batches - validation
                       batches, i.e. validation set-up + checkpoint + epoch-end work (ms, median
                       of steady-state epochs); ckpt_ms and val_setup_ms are its two named parts
      maxdiff          largest |difference| of final train/val loss and weights (<= 1e-5)
    Last line: `digits_ratio=.. digits_cpu_ratio=.. ... resnet18_ratio=.. ...`.
    """
    names = list(WORKLOADS) if args.workload == "all" else [args.workload]
    figures: Figures = {}
    for name in names:
        figures.update(
            overhead_workload(name, args.epochs, args.reps, args.tw_override, args.raw_ckpt)
        )
    return figures


# --- host --------------------------------------------------------------------------------------

FEATURES, CLASSES, HIDDEN = 32, 10, 64
IMAGE, CHANNELS = (3, 8, 8), 8  # the bf16 + channels_last sides' images and conv width
HOST_SIDES = (
    "raw",
    "bare",
    "bare_task",
    "lightning",
    "tw_user",
    "tw_task",
    "tw_lm",
    "bare_bf16_cl",
    "tw_task_bf16_cl",
)
LM_TINY = [
    "experiment=lm_accum",
    "data.num_sequences=1280",  # ~64 micro-batches of 16 per epoch
    "data.max_len=16",
    "data.min_len=4",
    "model.net.dim=16",
    "model.net.depth=1",
    "model.net.heads=2",
]


def make_net() -> nn.Module:
    """conf/model/mlp.yaml's net (the tw_task side's), Flatten included: every side runs the same
    modules, so no side's ratio counts a module call the other does not make."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, CLASSES)
    )


def make_cnn() -> nn.Module:
    """The bf16 + channels_last sides' net: one convolution (NHWC in channels_last), pooled."""
    return nn.Sequential(
        nn.Conv2d(IMAGE[0], CHANNELS, 3, padding=1),
        nn.Tanh(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(CHANNELS, CLASSES),
    )


_TASK_OPTIMIZATION: list[Any] = []
# The ClassificationTask's model config, and the tiny language model: the sides that run them.
HOST_TASK = harness.Workload("the ClassificationTask example", ("model=mlp",), harness.CLASSIFIER)
HOST_LM = harness.Workload(
    "the language-model example",
    tuple(LM_TINY),
    ("project.tasks.language_model", "project.models.transformer", "project.data.sequences"),
)
SIDE_WORKLOADS = {
    "bare_task": HOST_TASK,
    "tw_task": HOST_TASK,
    "tw_task_bf16_cl": HOST_TASK,
    "tw_lm": HOST_LM,
}


def task_optimization(params: Any, total_steps: int) -> tuple[Any, Any]:
    """The ClassificationTask's default optimizer and per-step schedule (model=mlp), built from
    the composed config as the task builds them: every side pays the same optimizer arithmetic."""
    if not _TASK_OPTIMIZATION:
        overrides = harness.resolve(HOST_TASK)
        if overrides is None:  # the same two nodes, from the engine's groups model=mlp names
            group = harness.CONF / "model"
            model = OmegaConf.create(
                {
                    "optimizer": OmegaConf.load(group / "optimizer" / "sgd.yaml"),
                    "scheduler": OmegaConf.load(group / "scheduler" / "warmup_cosine.yaml"),
                }
            )
        else:
            with tempfile.TemporaryDirectory(prefix="tw-pace-host-") as tmp:
                model = compose(overrides, Path(tmp)).model
        _TASK_OPTIMIZATION.extend([model.optimizer, model.scheduler])
    optimizer = instantiate(_TASK_OPTIMIZATION[0])(params)
    return optimizer, instantiate(_TASK_OPTIMIZATION[1])(optimizer, total_steps=total_steps)


class VectorData(L.LightningDataModule):
    """Seeded Gaussian features with a learnable label; train / val / test splits. `images`:
    3x8x8 images in channels_last memory instead (the bf16 + channels_last sides)."""

    num_classes = CLASSES  # the task's model.num_classes defaults to the datamodule's

    def __init__(self, num_samples: int = 4096, num_val: int = 64, batch_size: int = 16,
                 seed: int = 0, images: bool = False) -> None:  # fmt: skip
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        shape = IMAGE if images else (FEATURES,)
        x = torch.randn(num_samples + 2 * num_val, *shape, generator=gen)
        y = x.flatten(1)[:, :CLASSES].argmax(dim=1)
        if images:
            x = x.contiguous(memory_format=torch.channels_last)
        n = num_samples
        self.splits = {
            "train": TensorDataset(x[:n], y[:n]),
            "val": TensorDataset(x[n : n + num_val], y[n : n + num_val]),
            "test": TensorDataset(x[n + num_val :], y[n + num_val :]),
        }
        self.batch_size, self.seed = batch_size, seed

    def train_dataloader(self) -> DataLoader:
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.splits["train"], self.batch_size, shuffle=True, generator=gen)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["val"], self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], self.batch_size)


class UserModule(L.LightningModule):
    """What a user writes: a net, its loss, an optimizer with a per-step schedule; `log=True`
    logs the loss each step."""

    def __init__(self, log: bool = True, cnn: bool = False) -> None:
        super().__init__()
        self.net, self.logging = make_cnn() if cnn else make_net(), log

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if self.logging:
            self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.log("val/loss", F.cross_entropy(logits, y))
        self.log("val/acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def configure_optimizers(self) -> Any:
        steps = int(self.trainer.estimated_stepping_batches)
        optimizer, schedule = task_optimization(self.parameters(), steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


Epoch = tuple[float, float, int]  # wall seconds, training-thread CPU seconds, batches


def epoch_windows(clock: harness.StepClock, batches: list[int]) -> list[Epoch]:
    """Per epoch, the clock's two marks (first batch start, last batch end) as one window:
    wall seconds, the training thread's CPU seconds, and the batches in between."""
    marked = [(w[0], c[0]) for w, c in zip(clock.seconds(), clock.cpu_seconds(), strict=True) if w]
    return [(wall, cpu, n) for (wall, cpu), n in zip(marked, batches, strict=True)]


class StepTimer(L.Callback):
    """Per epoch: first batch start -> last batch end, and the number of batches in between, on
    the host's clocks (harness.StepClock(host=True))."""

    last: ClassVar[list[Epoch]] = []

    def __init__(self) -> None:
        self.clock = harness.StepClock(host=True)
        self.batches: list[int] = []

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if args[-1] == 0:  # batch_idx
            self.clock.epoch()
            self.clock.mark()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if args[-1] + 1 == trainer.num_training_batches:
            self.clock.mark()
            self.batches.append(args[-1] + 1)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        StepTimer.last = epoch_windows(self.clock, self.batches)


def per_step_us(epochs: list[Epoch]) -> dict[str, float]:
    """Mean µs per batch over the epochs after the first: wall and training-thread CPU."""
    if not epochs:
        raise RuntimeError("pace host: the fit ran no timed epoch (was the StepTimer installed?)")
    steady = epochs[1:] if len(epochs) > 1 else epochs
    batches = sum(n for _, _, n in steady)
    return {
        "wall": 1e6 * sum(w for w, _, _ in steady) / batches,
        "cpu": 1e6 * sum(c for _, c, _ in steady) / batches,
    }


def host_raw(epochs: int, samples: int) -> dict[str, float]:
    torch.manual_seed(0)
    data = VectorData(num_samples=samples)
    net = make_net()
    loader = data.train_dataloader()
    optimizer, schedule = task_optimization(net.parameters(), epochs * len(loader))
    clock, batches = harness.StepClock(host=True), []
    for _ in range(epochs):
        clock.epoch()
        clock.mark()
        n = 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            schedule.step()
            n += 1
        clock.mark()
        batches.append(n)
        with torch.no_grad():  # a validation pass, outside the timed window as on every side
            for x, _y in data.val_dataloader():
                net(x)
    return per_step_us(epoch_windows(clock, batches))


@contextmanager
def lightning_as_shipped() -> Iterator[None]:
    """Lightning's own hook dispatch for the Lightning sides: a trainwell run earlier in this
    process patched it (compat.skip_empty_callback_hooks, lean_module_hooks,
    cache_training_step_signature, cache_data_hook_instances), which would flatter those sides."""
    from lightning.pytorch.loops import training_epoch_loop
    from lightning.pytorch.trainer import call
    from lightning.pytorch.trainer.connectors.data_connector import _DataHookSelector

    names = [
        (call, "_call_callback_hooks"),
        (call, "_call_lightning_module_hook"),
        (call, "_call_strategy_hook"),
        (training_epoch_loop, "is_param_in_hook_signature"),
        (_DataHookSelector, "get_instance"),
    ]
    patched = [(owner, name, getattr(owner, name)) for owner, name in names]
    for owner, name, fn in patched:
        setattr(owner, name, getattr(fn, "_trainwell_original", fn))
    try:
        yield
    finally:
        for owner, name, fn in patched:
            setattr(owner, name, fn)


def task_module(samples: int, tmp: Path) -> L.LightningModule:
    """The tw_task side's module for a bare Trainer: model=mlp's ClassificationTask (its loss,
    training metrics, optimizer and schedule), built from the config the tw_task side composes."""
    return instantiate(trainwell_config("tw_task", 1, samples, tmp).model)


def host_lightning(
    epochs: int,
    samples: int,
    tmp: Path,
    as_users_run_it: bool,
    bf16_cl: bool = False,
    task: bool = False,
) -> dict[str, float]:
    from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
    from lightning.pytorch.loggers import CSVLogger

    L.seed_everything(0, verbose=False)
    callbacks: list[L.Callback] = [StepTimer()]
    if bf16_cl:
        callbacks.append(loops.ChannelsLast())
        extra_precision = {"precision": "bf16-mixed"}
    else:
        extra_precision = {}
    extra: dict[str, Any] = {"enable_progress_bar": False, "enable_checkpointing": False}
    if as_users_run_it:
        callbacks += [
            TQDMProgressBar(),
            ModelCheckpoint(tmp / "ckpt", monitor="val/acc", mode="max"),
        ]
        extra = {"logger": CSVLogger(tmp), "log_every_n_steps": 10}
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=epochs, callbacks=callbacks,
        enable_model_summary=False, default_root_dir=tmp,
        logger=extra.pop("logger", False), **extra, **extra_precision,
    )  # fmt: skip
    StepTimer.last = []  # a fit that never reaches on_fit_end must not report the previous one
    module = task_module(samples, tmp) if task else UserModule(log=as_users_run_it, cnn=bf16_cl)
    with lightning_as_shipped():
        trainer.fit(module, VectorData(num_samples=samples, images=bf16_cl))
    return per_step_us(StepTimer.last)


def trainwell_config(side: str, epochs: int, samples: int, tmp: Path) -> Any:
    overrides = harness.resolve(SIDE_WORKLOADS.get(side, HOST_TASK))
    if overrides is None:  # tw_user: its model and data replace the composed ones below
        overrides = list(harness.OWNED)
    bf16_cl = side == "tw_task_bf16_cl"
    if bf16_cl:
        overrides = [
            *overrides,
            "trainer.precision=bf16-mixed",
            "+callbacks.bench_cl._target_=loops.ChannelsLast",
        ]
    cfg = compose(
        [*overrides, f"trainer.max_epochs={epochs}", "test=false", "print_config=false"], tmp
    )
    with open_dict(cfg):
        cfg.callbacks.host_timer = OmegaConf.create({"_target_": "pace.StepTimer"})
        if side == "tw_lm":
            return cfg
        cfg.data = OmegaConf.create(
            {"_target_": "pace.VectorData", "num_samples": samples, "batch_size": 16,
             "images": bf16_cl}
        )  # fmt: skip
        if side == "tw_user":
            cfg.model = OmegaConf.create({"_target_": "pace.UserModule"})
        elif bf16_cl:
            cfg.model.net = OmegaConf.create({"_target_": "pace.make_cnn"})
        else:
            cfg.model.net._args_[1].in_features = FEATURES
    return cfg


def host_trainwell(side: str, epochs: int, samples: int, tmp: Path) -> dict[str, float]:
    from trainwell.training.run import train

    StepTimer.last = []
    train(trainwell_config(side, epochs, samples, tmp))
    return per_step_us(StepTimer.last)


def host_side(side: str, epochs: int, samples: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tw-pace-host-") as tmp:
        if side == "raw":
            return host_raw(epochs, samples)
        if side in ("bare", "bare_task", "lightning", "bare_bf16_cl"):
            return host_lightning(
                epochs, samples, Path(tmp), as_users_run_it=side == "lightning",
                bf16_cl=side == "bare_bf16_cl", task=side == "bare_task",
            )  # fmt: skip
        return host_trainwell(side, epochs, samples, Path(tmp))


# (figure name, numerator side, denominator side): the targets compare these pairs.
HOST_RATIOS = (
    ("bare_vs_raw", "bare", "raw"),
    ("lightning_vs_bare", "lightning", "bare"),
    ("tw_user_vs_lightning", "tw_user", "lightning"),
    ("tw_task_vs_bare", "tw_task", "bare"),
    # the same work on both sides: the task's module under a bare Trainer and under trainwell
    ("tw_task_vs_bare_task", "tw_task", "bare_task"),
    ("tw_task_vs_lightning", "tw_task", "lightning"),
    # bf16-mixed + channels_last (the mode with the largest GPU gap): the same figure
    ("tw_task_vs_bare_bf16_cl", "tw_task_bf16_cl", "bare_bf16_cl"),
)


def host_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=4, help="timed: the 2nd epoch on")
    parser.add_argument("--samples", type=int, default=4096, help="train samples (batch 16)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sides", default=",".join(HOST_SIDES), help="comma-separated subset")


def run_host(args: argparse.Namespace) -> Figures:
    """Host (Python) cost per training step: trainwell vs Lightning vs a hand-written loop.

        OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pace.py host   # 4 epochs x 256 steps, 3 reps
        .venv/bin/python benchmarks/pace.py host --reps 5 --sides raw,bare,tw_task
        .venv/bin/python benchmarks/pace.py host --epochs 2 --samples 128 --reps 1   # smoke

    A near-zero-compute workload (a 32-feature MLP, micro-batch 16, 256 steps per epoch, one
    thread) makes every side's per-step Python visible: on a GPU a step of ~10 ms of kernels
    loses every millisecond the host spends between them. Sides, interleaved in one process (the
    order rotates between repetitions), all on the same data, net, optimizer and schedule (the
    ClassificationTask's defaults, read from conf/model: SGD with Nesterov momentum and weight
    decay, a warmup-cosine learning rate stepped after every optimizer step), so the ratios
    measure the loops, not the optimizers:

      raw       zero_grad / forward / loss / backward / step / schedule step over the same
                DataLoader
      bare      a bare Lightning Trainer (no logger, checkpoint, bar, summary); the module
                returns its loss and logs nothing
      bare_task the same bare Trainer on tw_task's module (ClassificationTask, model=mlp): its
                training loss and accuracy updated at every step, as under trainwell, so
                tw_task / bare_task compares the same work (tw_task / bare adds the task's metrics
                to trainwell's side only)
      lightning Lightning as users run it: the same module logging its loss each step
                (`self.log(..., prog_bar=True)`), CSV logger, TQDM bar, ModelCheckpoint on
                val/acc, log_every_n_steps as trainwell's default (10)
      tw_user   `trainwell.training.run.train` with every default, on the `lightning` side's
                module
      tw_task   the same, with trainwell's own ClassificationTask (model=mlp, 32 input features)
      tw_lm     the same, with experiment=lm_accum on a tiny Transformer (its own workload: its
                figure is tracked on its own, not compared)
      bare_bf16_cl, tw_task_bf16_cl   `bare` and `tw_task` in bf16-mixed with channels_last
                (3x8x8 images in NHWC memory, a one-convolution net turned channels_last): the
                mode with the largest gap on the H100

    Timed: epochs 2.. (the first pays one-off costs), from the start of each epoch's first batch
    to the end of its last (validation and checkpoints excluded; harness.StepClock on the host's
    clocks), per training batch, in microseconds, on two clocks: the training thread's CPU time
    (`cpu`, the headline: what the Python of a step costs, robust when neighbours load the
    machine) and wall time (`wall`). Ratios are per repetition (every side under the same load),
    then the median across repetitions. The Lightning sides run Lightning's own hook dispatch
    even after a trainwell side patched it. `pace.py host` runs with OMP_NUM_THREADS=1 unless
    set otherwise.
    Last line: `<side>_cpu_us=.. <side>_wall_us=.. ... tw_task_vs_bare=.. tw_task_vs_bare_task=..
    tw_user_vs_lightning=.. tw_task_vs_bare_bf16_cl=.. ..._wall=..` (ratios without a suffix are
    CPU; `_spread` = half-range / median).
    """
    import logging
    import warnings

    # One-line progress per repetition, not Lightning's banner per fit.
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    sides = [s for s in args.sides.split(",") if s]
    unknown = set(sides) - set(HOST_SIDES)
    if unknown:
        raise SystemExit(f"unknown sides {sorted(unknown)}; choose from {','.join(HOST_SIDES)}")
    for side in [s for s in sides if s in SIDE_WORKLOADS]:
        if harness.resolve(SIDE_WORKLOADS[side]) is None:  # its example is not in this clone
            print(harness.skip_line(f"side {side!r}", harness.missing(SIDE_WORKLOADS[side].needs)))
            sides.remove(side)

    def side_fn(side: str) -> Any:
        return lambda: host_side(side, args.epochs, args.samples)

    def report(rep: int, results: dict[str, dict[str, float]]) -> None:
        line = " ".join(f"{k} {v['cpu']:.0f}/{v['wall']:.0f}" for k, v in results.items())
        print(f"[rep {rep}] us/step cpu/wall: {line}", flush=True)

    runs = interleaved({s: side_fn(s) for s in sides}, args.reps, report)
    figures: Figures = {}
    for clock in ("cpu", "wall"):
        for side in sides:
            values = [r[clock] for r in runs[side]]
            figure(figures, f"{side}_{clock}_us", values, f"{side} {clock} us/step", " us")
    for clock in ("cpu", "wall"):
        for name, num, den in HOST_RATIOS:
            if num in runs and den in runs:
                ratios = [a[clock] / b[clock] for a, b in zip(runs[num], runs[den], strict=True)]
                suffix = "" if clock == "cpu" else "_wall"
                label = f"{name} {clock} ({num} / {den}, per repetition)"
                figure(figures, f"{name}{suffix}", ratios, label, spread=True)
    return figures


# --- throughput --------------------------------------------------------------------------------

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
    "bare_img_s",
    "raw_img_s",
    "ratio",
    "bare_ratio",
    "tw_vs_bare",
    "mfu",
    "tw_peak_mib",
    "tw_step_ms",
    "bare_step_ms",
    "raw_step_ms",
    "tw_ckpt_ms",
    "bare_ckpt_ms",
    "raw_ckpt_ms",
    "tw_fixed_ms",
    "bare_fixed_ms",
    "raw_fixed_ms",
    "tw_after_ckpt",
    "bare_after_ckpt",
    "raw_after_ckpt",
    "tw_maxdiff",
    "bare_maxdiff",
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

    from project.models.resnet import ResNet18

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
    """Every mode, each side in `args.sides`, interleaved; per-mode figures (medians) and the
    samples.

    `deadline` (time.perf_counter() value): repetitions not started by then are skipped;
    `progress` gets the samples so far after every repetition of a mode (a caller saves them,
    in case the process is stopped)."""
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
                tw_overrides.append("+callbacks.bench_cl._target_=loops.ChannelsLast")

            def run_tw(tw_overrides: list[str] = tw_overrides) -> dict:
                with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
                    if cuda:
                        torch.cuda.reset_peak_memory_stats()
                    out = loops.run_trainwell(
                        [*tw_overrides, *args.tw_override], args.epochs, Path(tmp)
                    )
                    out["images_per_epoch"] = args.num_samples
                    return {**out, **logged_figures(Path(tmp))}

            def run_raw(overrides: list[str] = overrides, cl: bool = channels_last) -> dict:
                with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
                    return loops.run_raw(
                        overrides, args.epochs, Path(tmp), device=device,
                        channels_last=cl, ckpt=args.raw_ckpt,
                    )  # fmt: skip

            def run_bare(overrides: list[str] = overrides, cl: bool = channels_last) -> dict:
                with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
                    out = loops.run_bare(
                        overrides, args.epochs, Path(tmp), device=device, channels_last=cl
                    )
                    out["images_per_epoch"] = args.num_samples
                    return out

            sides = {"tw": run_tw, "bare": run_bare, "raw": run_raw}
            runs = harness.rotated({k: v for k, v in sides.items() if k in args.sides}, rep)
            row = samples[mode]
            figures = side_figures(runs)
            for key, value in figures.items():
                row.setdefault(key, []).append(value)
            if progress is not None:
                progress({"samples": samples})
            print(f"[rep {rep} {mode}] " + progress_line(figures), flush=True)
    results: dict[str, dict[str, Any]] = {}
    for mode, row in samples.items():
        if not row:
            continue
        # Ratios per repetition (the sides of one repetition ran under the same load), then
        # the median; the sides' own figures are medians of their samples.
        med = {k: statistics.median(v) for k, v in row.items()}
        peak = dtype_peak(MODES[mode][2])
        med |= {
            "flops_per_image": flops,
            "peak_flops": peak or float("nan"),
            "reps": max(len(v) for v in row.values()),
        }
        for side in ("tw", "bare", "raw"):
            if f"{side}_img_s" in med:
                images = med[f"{side}_img_s"]
                med[f"{side}_mfu"] = images * flops / peak if peak else float("nan")
                med[f"{side}_mfu_bf16"] = images * flops / peak_bf16 if peak_bf16 else float("nan")
        if "tw_img_s" in row:
            tw = row["tw_img_s"]
            med["mfu"], med["mfu_bf16"] = med["tw_mfu"], med["tw_mfu_bf16"]
            med["tw_spread"] = (max(tw) - min(tw)) / 2 / med["tw_img_s"]
        if "ratio" in row:
            med["ratio_min"] = min(row["ratio"])
        results[mode] = {"median": med, "samples": row}
    return results


SIDES = ("tw", "bare", "raw")
# (figure, numerator side, denominator side): the gap and its two shares, in img/s
RATIOS = (
    ("ratio", "tw", "raw"),  # the whole gap (target >= 0.97)
    ("bare_ratio", "bare", "raw"),  # Lightning's share: its loop, checkpoint IO, logging
    ("tw_vs_bare", "tw", "bare"),  # ours: the task, callbacks and checkpoint IO (target >= 1.0)
)


def side_figures(runs: dict[str, dict]) -> dict[str, float]:
    """One repetition's figures: per side, and the ratios between the sides that ran."""
    figures: dict[str, float] = {}
    for side, run in runs.items():
        steps = [s for epoch in run["step_seconds"][1:] for s in epoch] or [float("nan")]
        costs = harness.fixed_costs(run)
        figures |= {
            f"{side}_img_s": images_per_second(run),
            f"{side}_peak_mib": run["peak_memory"] / 2**20,
            f"{side}_step_ms": 1000 * statistics.median(steps),
            f"{side}_after_ckpt": harness.after_checkpoint(run["step_seconds"]),
            **{f"{side}_{k}": v for k, v in costs.items()},
            # The epoch's fixed cost besides the two named parts: epoch-end hooks and logging.
            f"{side}_other_ms": costs["fixed_ms"] - costs["ckpt_ms"] - costs["val_setup_ms"],
            **{f"{side}_{k}": v for k, v in run.items() if k.startswith("logged_")},
        }
    for name, num, den in RATIOS:
        if num in runs and den in runs:
            figures[name] = figures[f"{num}_img_s"] / figures[f"{den}_img_s"]
    for side in ("tw", "bare"):
        if side in runs and "raw" in runs:
            # Same init, data order, optimizer and schedule: the same final weights (exactly in
            # fp32 on a CPU): every side did the same work.
            figures[f"{side}_maxdiff"] = weight_difference(runs[side], runs["raw"])
    return figures


def progress_line(figures: dict[str, float]) -> str:
    sides = [s for s in SIDES if f"{s}_img_s" in figures]
    return (
        " / ".join(sides) + ": "
        + " / ".join(f"{figures[f'{s}_img_s']:.0f}" for s in sides) + " img/s, step "
        + " / ".join(f"{figures[f'{s}_step_ms']:.1f}" for s in sides) + " ms, ckpt "
        + " / ".join(f"{figures[f'{s}_ckpt_ms']:.1f}" for s in sides) + " ms/epoch, peak "
        + " / ".join(f"{figures[f'{s}_peak_mib']:.0f}" for s in sides) + " MiB"
    )  # fmt: skip


def _cell(m: dict[str, Any], key: str, fmt: str, sides: tuple[str, ...] = SIDES) -> str:
    return " / ".join(format(m.get(f"{side}_{key}", float("nan")), fmt) for side in sides)


def table(results: dict[str, dict[str, Any]]) -> str:
    """Throughput and MFU (trainwell vs raw), then the gap split three ways, per mode."""
    lines = [
        "| mode | trainwell img/s | raw img/s | ratio (min) | MFU tw / raw | logged img/s, MFU "
        "| peak MiB tw / raw |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, res in results.items():
        m = res["median"]
        logged = f"{m.get('tw_logged_img_s', float('nan')):.0f}, {m.get('tw_logged_mfu', float('nan')):.3f}"
        lines.append(
            f"| {mode} | {m.get('tw_img_s', float('nan')):.0f} | {m.get('raw_img_s', float('nan')):.0f} "
            f"| {m.get('ratio', float('nan')):.3f} ({m.get('ratio_min', float('nan')):.3f}) "
            f"| {_cell(m, 'mfu', '.3f', ('tw', 'raw'))} | {logged} "
            f"| {_cell(m, 'peak_mib', '.0f', ('tw', 'raw'))} |"
        )
    lines += [
        "",
        "The gap split: raw -> bare Lightning (Lightning's share) -> trainwell (ours).",
        "",
        "| mode | img/s tw / bare / raw | bare / raw | tw / bare | step ms tw / bare / raw "
        "| fixed ms/epoch tw / bare / raw | ckpt ms | val set-up ms | other ms "
        "| after-ckpt step tw / bare / raw |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, res in results.items():
        m = res["median"]
        lines.append(
            f"| {mode} | {_cell(m, 'img_s', '.0f')} | {m.get('bare_ratio', float('nan')):.3f} "
            f"| {m.get('tw_vs_bare', float('nan')):.3f} | {_cell(m, 'step_ms', '.2f')} "
            f"| {_cell(m, 'fixed_ms', '.1f')} | {_cell(m, 'ckpt_ms', '.1f')} "
            f"| {_cell(m, 'val_setup_ms', '.1f')} | {_cell(m, 'other_ms', '.1f')} "
            f"| {_cell(m, 'after_ckpt', '.2f')} |"
        )
    return "\n".join(lines)


# -- op parity (--ops): the operations of one steady step, per side -------------------------------
OPS_BATCH = 3  # the profiled batch: the first ones allocate optimizer state and warm caches
# Operations that launch no kernel: views and aliases (metadata only).
VIEWS = frozenset(
    "aten::" + n
    for n in (
        "detach", "alias", "view", "_unsafe_view", "reshape", "select", "slice", "as_strided",
        "permute", "expand", "t", "transpose", "unsqueeze", "squeeze", "flatten", "lift_fresh",
        "numpy_T", "unbind", "split", "chunk", "narrow", "view_as", "expand_as",
    )
)  # fmt: skip
# Conversions: counted only when they copied (memory format, dtype); no-ops otherwise.
CONVERTERS = frozenset(("aten::to", "aten::contiguous", "aten::type_as"))
# Operations that copy: listed first, the tell-tale cost of a mode (channels_last above all).
COPIES = CONVERTERS | {"aten::_to_copy", "aten::copy_", "aten::clone"}


class OpWindow(L.Callback):
    """Profiles batch OPS_BATCH of the first epoch on the CPU: from its on_train_batch_start to
    the next batch's (the step, its hooks, the next batch's fetch and transfer)."""

    events: ClassVar[list[Any]] = []

    def __init__(self) -> None:
        self._prof: Any = None

    def mark(self, batch_idx: int) -> None:
        from torch.profiler import ProfilerActivity, profile

        if batch_idx == OPS_BATCH and self._prof is None:
            self._prof = profile(activities=[ProfilerActivity.CPU], with_stack=True)
            self._prof.__enter__()
        elif batch_idx == OPS_BATCH + 1 and self._prof is not None:
            self._prof.__exit__(None, None, None)
            OpWindow.events = list(self._prof.events())
            self._prof = None

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, i: int) -> None:
        self.mark(i)


def _origin(event: Any) -> str:
    """Where an operation comes from: the backward node or optimizer step that ran it, else the
    innermost Python frame outside torch (trainwell, the task, Lightning, this benchmark)."""
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name
        if name.startswith("autograd::engine::evaluate_function: "):
            return "backward " + name.split(": ", 1)[1]
        if "torch/optim/" in name:  # called from Lightning's loop or the raw loop: the same
            return "optimizer.step"
        if ".py(" in name and "/torch/" not in f"/{name}" and "torchmetrics/" not in name:
            return name.replace("site-packages/", "")
        parent = parent.cpu_parent
    return "?"


def op_counts(events: list[Any]) -> dict[str, Counter[str]]:
    """Per aten operation called from Python or a backward node (not one inside another), the
    count by origin; views and conversions that copied nothing are left out (no kernel)."""
    out: dict[str, Counter[str]] = {}
    for e in events:
        parent = e.cpu_parent
        if not e.name.startswith("aten::") or e.name in VIEWS:
            continue
        if parent is not None and parent.name.startswith("aten::"):
            continue
        if e.name in CONVERTERS and not any(c.name.startswith("aten::") for c in e.cpu_children):
            continue
        out.setdefault(e.name, Counter())[_origin(e)] += 1
    return out


def ops_of_side(side: str, overrides: list[str], channels_last: bool, tmp: Path) -> Counter:
    """One short fit of `side`, profiled at batch OPS_BATCH; the per-op counts by origin."""
    OpWindow.events = []
    window = OpWindow()
    if side == "tw":
        extra = ["+callbacks.bench_ops._target_=pace.OpWindow"]
        if channels_last:
            extra.append("+callbacks.bench_cl._target_=loops.ChannelsLast")
        loops.run_trainwell([*overrides, *extra], 1, tmp)
    elif side == "bare":
        loops.run_bare(overrides, 1, tmp, channels_last=channels_last, extra_callbacks=(window,))
    else:
        built = loops.build_from_config(overrides, 1, tmp, channels_last=channels_last)
        optimizer, scheduler = built.optimization(built.net.parameters())
        loops.fit(
            built.net, built.datamodule.train_dataloader(), None, optimizer, scheduler, 1,
            built.accumulate, built.precision, max_batches=OPS_BATCH + 2, on_batch=window.mark,
            label_smoothing=loops.label_smoothing(built.cfg),
        )  # fmt: skip
    if not OpWindow.events:
        raise RuntimeError(f"--ops: the {side} side never reached batch {OPS_BATCH + 1}")
    return op_counts(OpWindow.events)


def ops_table(mode: str, counts: dict[str, dict[str, Counter[str]]]) -> tuple[str, dict]:
    """The operations whose count differs from the raw loop's, copies first; figures."""
    names = sorted({n for side in counts.values() for n in side})
    total = {s: {n: sum(c.get(n, Counter()).values()) for n in names} for s, c in counts.items()}
    rows, figures = [], {}
    for side in ("tw", "bare"):
        extra = [n for n in names if total[side][n] > total["raw"][n]]
        figures[f"{mode}_{side}_extra_ops"] = sum(total[side][n] - total["raw"][n] for n in extra)
        figures[f"{mode}_{side}_extra_copies"] = sum(
            total[side][n] - total["raw"][n] for n in extra if n in COPIES
        )
    differ = [n for n in names if total["tw"][n] != total["raw"][n]]
    differ.sort(key=lambda n: (n not in COPIES, total["raw"][n] - total["tw"][n], n))
    for n in differ:
        # Per origin, trainwell's calls beyond the raw loop's from the same place (the net's
        # forward, the optimizer, the loader and backward nodes are shared origins).
        raw_origins = counts["raw"].get(n, Counter())
        origins = Counter(counts["tw"].get(n, Counter()))
        origins.subtract(raw_origins)
        where = "; ".join(f"{o} x{k}" for o, k in origins.most_common() if k > 0)
        rows.append(
            f"| {mode} | {n} | {total['tw'][n]} | {total['bare'][n]} | {total['raw'][n]} "
            f"| {total['tw'][n] - total['raw'][n]:+d} | {where} |"
        )
    return "\n".join(rows), figures


def measure_ops(args: argparse.Namespace) -> Figures:
    """--ops: per mode, the aten operations one steady step runs, trainwell and bare Lightning
    against the raw loop, with trainwell's GPU code paths (cadence.host_reads_are_free: no)."""
    from trainwell.callbacks import cadence

    cadence.host_reads_are_free = lambda device: False  # as on a GPU (benchmarks/sync_probe.py)
    header = (
        "| mode | op | tw | bare | raw | tw - raw | origin of trainwell's extra calls |\n"
        "|---|---|---|---|---|---|---|"
    )
    rows, figures = [header], {}
    for mode in args.modes:
        overrides, channels_last, _ = MODES[mode]
        overrides = [*base_overrides(args, False), *overrides]
        counts = {}
        try:
            with tempfile.TemporaryDirectory(prefix="tw-bench-ops-") as tmp:
                for side in SIDES:
                    counts[side] = ops_of_side(side, overrides, channels_last, Path(tmp) / side)
        except Exception as exc:  # compile may be unavailable on a CPU: report it, go on
            if "compile" not in mode:
                raise
            line = (
                str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            )
            print(f"[ops {mode}] compile unavailable on this CPU backend: {line}", flush=True)
            figures[f"{mode}_tw_extra_ops"] = "unavailable"
            continue
        text, found = ops_table(mode, counts)
        figures |= found
        rows.append(text or f"| {mode} | (none) | | | | 0 | |")
        print(f"[ops {mode}] extra ops per step: tw {found[f'{mode}_tw_extra_ops']}, bare "
              f"{found[f'{mode}_bare_extra_ops']}", flush=True)  # fmt: skip
    text = "\n".join(rows)
    print(text)
    out = harness.output_dir(args.out)
    if out is not None:
        (out / "step_ops.md").write_text(text + "\n")
    return figures


def throughput_arguments(p: argparse.ArgumentParser, cuda: bool = CUDA) -> None:
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
    p.add_argument(
        "--sides",
        nargs="+",
        choices=list(SIDES),
        default=list(SIDES),
        help="tw: trainwell, bare: bare Lightning, raw: the hand-written loop",
    )
    p.add_argument("--out", default=None, help="folder for throughput.json (default: $OUT)")
    p.add_argument(
        "--ops",
        action="store_true",
        help="op parity instead: the aten operations of one steady step per side (CPU profiler)",
    )
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


def throughput_options(argv: list[str], cuda: bool = CUDA) -> argparse.Namespace:
    """The throughput part's options for `argv` (its defaults for `cuda`): how the epoch part and
    the GPU suite call `measure`."""
    parser = argparse.ArgumentParser()
    throughput_arguments(parser, cuda)
    return parser.parse_args(argv)


def throughput_title(args: argparse.Namespace) -> str:
    return f"P2 throughput on {'GPU ' + torch.cuda.get_device_name(0) if CUDA else 'CPU'}"


def run_throughput(args: argparse.Namespace) -> Figures:
    """P2: ResNet-18 training throughput: trainwell, bare Lightning and the raw loop, same work.

        .venv/bin/python benchmarks/pace.py throughput                  # on a GPU box
        .venv/bin/python benchmarks/pace.py throughput --num-samples 256 --num-val 64 --batch 32 \\
            --width 8 --modes fp32 --epochs 2                          # tiny CPU smoke run
        .venv/bin/python benchmarks/pace.py throughput --ops --num-samples 64 --num-val 16 \\
            --batch 8 --modes fp32 bf16 bf16_cl bf16_cl_compile       # op parity (CPU profiler)

    Three sides, interleaved in one process (the order rotates between repetitions), run
    `model=resnet18 data=synthetic` (CIFAR-shaped) through the SAME data path: by default the
    on-device pipeline (`data.on_device=true data.augment=true`: uint8 on the GPU, crop + flip +
    normalise per batch there), `--data cpu` for the DataLoader path. All validate once per epoch
    and checkpoint every epoch with the same policy (last.ckpt every epoch, best.ckpt when val
    accuracy improved):
      tw    `train()` itself with its default callbacks and CSV logger (atomic background writes)
      bare  Lightning's Trainer with none of trainwell's callbacks, task or checkpoint IO
            (loops.py: Lightning's ModelCheckpoint, its own IO, CSV logger)
      raw   the hand-written loop (loops.py: atomic writes in a background thread;
            `--raw-ckpt sync` for an inline-writing raw loop)
    raw -> bare is Lightning's share of the gap, bare -> tw ours; `--sides` runs a subset.

    Modes:
      fp32             trainer.precision=32-true (TF32 matmuls: trainwell sets matmul precision high)
      bf16             trainer.precision=bf16-mixed
      bf16_cl          bf16 + channels_last: NHWC batches (data.channels_last) and an NHWC model
      bf16_cl_compile  + model.compile=true (torch.compile of the net, in place)

    Figures per mode and side (medians over repetitions; ratios per repetition, then the median):
      img/s     training images / training seconds of the epochs after the first (the first pays
                compile, cudnn autotune, allocator warm-up); validation and checkpoints excluded
      ratio     tw img/s / raw img/s (target >= 0.97); bare_ratio = bare / raw (Lightning's share),
                tw_vs_bare = tw / bare (ours; target >= 1.0)
      step_ms   median training step (batch start to the next, harness.StepClock: CUDA events)
      mfu       img/s x FLOPs per image (FlopCounterMode, forward + backward) / the device's dense
                peak for the mode's compute dtype (Lightning's get_available_flops: TF32 for fp32,
                bf16 otherwise); mfu_bf16 divides by the bf16 peak in every mode
      logged    what trainwell's ThroughputLogger logged (median over the last epoch): img/s, MFU
      peak_mib  torch.cuda.max_memory_allocated over the run
      ckpt_ms / val_setup_ms / fixed_ms   per-epoch fixed costs (see harness.fixed_costs); other_ms
                = fixed - ckpt - val set-up: epoch-end hooks and logging
      after_ckpt   the first step after an epoch's checkpoints / a steady step (background writes
                must not hold the next step: ~1.0; harness.after_checkpoint)

    `--ops` (op parity, on any machine): instead of timing, one steady training step of each side
    (batch 3 of the first epoch, from its on_train_batch_start to the next one's) runs under the torch
    profiler on the CPU, with trainwell's GPU code paths (cadence.host_reads_are_free answers no, as
    in benchmarks/sync_probe.py). Counted: the aten operations called from Python or by a backward
    node (not the ones inside them), without views and conversions that copied nothing (no kernel).
    Printed per mode: every operation whose count differs from the raw loop's, copies first, with
    trainwell's and bare Lightning's counts and the origin of trainwell's extra calls (the innermost
    frame outside torch, or the backward node). Last line: `<mode>_<side>_extra_ops=..` (operations
    beyond the raw loop's) and `<mode>_<side>_extra_copies=..`. On a CPU, compile needs a C++
    toolchain and minutes; where it fails the mode says so and the others go on.

    On a machine without CUDA it runs the same code on the CPU and says so (the smoke test).
    Writes throughput.json and a table to --out or $OUT when set. Last line: key=value figures.
    """
    if CUDA and not args.no_cudnn_benchmark:
        torch.backends.cudnn.benchmark = True  # process-wide: both sides pick the same way
    if args.ops:
        return measure_ops(args)
    if not CUDA:
        print("NOTE: no CUDA device: running on CPU for the smoke test; these are not GPU figures")
    results = measure(args)
    text = table(results)
    print(text)
    out = harness.output_dir(args.out)
    if out is not None:
        payload = {"args": vars(args), "device": torch.cuda.get_device_name(0) if CUDA else "cpu"}
        (out / "throughput.json").write_text(json.dumps({**payload, "modes": results}, indent=1))
        (out / "throughput.md").write_text(text + "\n")
    figures: Figures = {"device": "cuda" if CUDA else "cpu"}
    if all("tw_img_s" in r["median"] for r in results.values()):
        best = max(results, key=lambda m: results[m]["median"]["tw_img_s"])
        figures |= {"best_mode": best, "best_img_s": results[best]["median"]["tw_img_s"]}
    for mode, res in results.items():
        m = res["median"]
        for key in FINAL_KEYS:
            if key in m:
                figures[f"{mode}_{key}"] = m[key]
    return figures


# --- epoch -------------------------------------------------------------------------------------


def epoch_workload(args: argparse.Namespace) -> list[str]:
    return [
        *("--num-samples", str(args.steps * 8), "--num-val", "16", "--batch", "8"),
        *("--width", str(args.width), "--modes", "fp32", "--epochs", str(args.epochs)),
        *("--reps", str(args.reps), "--out", tempfile.mkdtemp(prefix="tw-epoch-cost-")),
        *("--data", "cpu"),  # the DataLoader path: what a CPU user runs
    ]


def state_size(width: int) -> tuple[int, float]:
    """(parameters, MB of weights + buffers + one momentum buffer per parameter) of the net."""
    from project.models.resnet import ResNet18

    net = ResNet18(width=width)
    params = sum(p.numel() * p.element_size() for p in net.parameters())
    buffers = sum(b.numel() * b.element_size() for b in net.buffers())
    return sum(p.numel() for p in net.parameters()), (2 * params + buffers) / 1e6


def per_rep(row: dict[str, list[float]], num: str, den: str) -> list[float]:
    """(num / den) per repetition; `num` and `den` are `+`-joined figure names."""

    def total(names: str, rep: int) -> float:
        return sum(row[name][rep] for name in names.split("+"))

    return [total(num, rep) / total(den, rep) for rep in range(len(row["tw_ckpt_ms"]))]


def epoch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--width", type=int, default=64, help="64: the H100 run's 11.2 M params")
    parser.add_argument("--steps", type=int, default=6, help="training steps per epoch")
    parser.add_argument("--epochs", type=int, default=4, help="the first is warm-up")
    parser.add_argument("--reps", type=int, default=3)


def run_epoch(args: argparse.Namespace) -> Figures:
    """Per-epoch fixed cost (checkpoint, validation set-up) with the H100 run's state, 3 sides.

    Trainwell vs bare Lightning vs the hand-written loop, on the CPU.

        OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pace.py epoch    # width 64, 3 reps, ~3 min
        .venv/bin/python benchmarks/pace.py epoch --width 4 --reps 1 --epochs 3   # smoke

    The state is the H100 throughput run's: ResNet-18 at width 64 (11.2 M parameters) with SGD's
    momentum buffers, ~90 MB. The epochs are short (6 steps of 8 CIFAR-shaped images, 2 validation
    batches) so that what happens once per epoch is a large, measurable share. The three sides are
    the throughput part's, on the CPU, interleaved in one process, on the same data path,
    model, optimizer and schedule, each validating and checkpointing once per epoch with the same
    policy (last.ckpt every epoch, best.ckpt when val/acc improved):

      tw    `train()` with every default; its checkpoints are written by a background thread
      bare  bare Lightning (loops.py): Lightning's ModelCheckpoint and IO
      raw   the hand-written loop: each file from its own snapshot (clone), written by a thread

    Figures (medians of the steady epochs; ratios per repetition, then the median):
      <side>_ckpt_ms        training-thread time in the epoch's checkpoint saves
      <side>_val_setup_ms   the validation pass minus its batches
      <side>_*_cpu_ms       the same two in the training thread's CPU time (robust when neighbours
                            load the machine; blind to waits: a pending write, the GIL, I/O)
      ckpt_val_ratio        tw (ckpt + val set-up) / raw (the target: <= 1.2); ckpt_ratio and
                            val_setup_ratio each part alone; bare_* the same for bare Lightning
      tw_vs_bare_ckpt_val   tw (ckpt + val set-up) / bare (ours against Lightning's)
      *_cpu_ratio, tw_vs_bare_ckpt_val_cpu   the same ratios on the CPU clock
      <side>_after_ckpt     the first step after the epoch's checkpoints / a steady step: a
                            background write must not hold the next step (~1.0)
      <side>_maxdiff        largest |final weight difference| against raw: 0 when the sides did
                            the same arithmetic
    """
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    row = measure(throughput_options(epoch_workload(args), cuda=False))["fp32"]["samples"]
    figures: Figures = {}
    for side in SIDES:
        parts = ("ckpt_ms", "val_setup_ms", "ckpt_cpu_ms", "val_setup_cpu_ms", "fixed_ms")
        for part in (*parts, "step_ms", "after_ckpt"):
            key = f"{side}_{part}"
            harness.figure(figures, key, row[key], f"{side} {part}")
    ratios = {
        "ckpt_val_ratio": ("tw_ckpt_ms+tw_val_setup_ms", "raw_ckpt_ms+raw_val_setup_ms"),
        "ckpt_ratio": ("tw_ckpt_ms", "raw_ckpt_ms"),
        "val_setup_ratio": ("tw_val_setup_ms", "raw_val_setup_ms"),
        "bare_ckpt_val_ratio": ("bare_ckpt_ms+bare_val_setup_ms", "raw_ckpt_ms+raw_val_setup_ms"),
        "tw_vs_bare_ckpt_val": ("tw_ckpt_ms+tw_val_setup_ms", "bare_ckpt_ms+bare_val_setup_ms"),
    }
    for name, (num, den) in list(ratios.items()):  # the same on the training thread's CPU clock
        cpu = name.replace("_ratio", "_cpu_ratio") if "ratio" in name else f"{name}_cpu"
        ratios[cpu] = (num.replace("_ms", "_cpu_ms"), den.replace("_ms", "_cpu_ms"))
    for name, (num, den) in ratios.items():
        harness.figure(
            figures, name, per_rep(row, num, den), f"{name} ({num} / {den})", spread=True
        )
    for side in ("tw", "bare"):
        worst = max(row[f"{side}_maxdiff"])
        figures[f"{side}_maxdiff"] = worst
        print(f"{side} vs raw: max |final weight difference| {worst:.2e} (fp32 CPU: 0 expected)")
    params, megabytes = state_size(args.width)
    print(f"state: {params / 1e6:.1f} M parameters, {megabytes:.0f} MB with buffers and momentum")
    figures["state_mb"] = megabytes
    return figures


# --- the runner --------------------------------------------------------------------------------


PARTS: dict[str, harness.Part] = {
    "overhead": harness.Part(
        lambda a: "P1 overhead: trainwell vs a hand-written loop (CPU fp32)",
        overhead_arguments,
        run_overhead,
        workload=harness.DIGITS,
    ),
    "host": harness.Part(
        lambda a: "host cost per training step (near-zero compute, one thread)",
        host_arguments,
        run_host,
    ),
    "epoch": harness.Part(
        lambda a: "per-epoch fixed cost (CPU, the H100 run's state)",
        epoch_arguments,
        run_epoch,
        needs=(*harness.RESNET, *harness.SYNTHETIC),  # the H100 run's ResNet-18 state
    ),
    "throughput": harness.Part(
        throughput_title,
        throughput_arguments,
        run_throughput,
        threads=0 if CUDA else 1,
        needs=(*harness.RESNET, *harness.SYNTHETIC),  # model=resnet18 data=synthetic
    ),
}


if __name__ == "__main__":
    sys.exit(harness.run_parts(__doc__ or "", PARTS))
