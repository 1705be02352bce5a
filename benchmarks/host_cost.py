"""Host (Python) cost per training step: trainwell vs Lightning vs a hand-written loop.

    .venv/bin/python benchmarks/host_cost.py                       # 4 epochs x 256 steps, 3 reps
    .venv/bin/python benchmarks/host_cost.py --reps 5 --sides raw,bare,tw_task
    .venv/bin/python benchmarks/host_cost.py --epochs 2 --samples 128 --reps 1   # smoke

A near-zero-compute workload (a 32-feature MLP, micro-batch 16, 256 steps per epoch, one
thread) makes every side's per-step Python visible: on a GPU a step of ~10 ms of kernels loses
every millisecond the host spends between them. Sides, interleaved in one process (the order
rotates between repetitions), all on the same data, net, optimizer and schedule (the
ClassificationTask's defaults, read from conf/model: SGD with Nesterov momentum and weight decay,
a warmup-cosine learning rate stepped after every optimizer step), so the ratios measure the
loops, not the optimizers:

  raw       zero_grad / forward / loss / backward / step / schedule step over the same DataLoader
  bare      a bare Lightning Trainer (no logger, checkpoint, bar, summary); the module returns
            its loss and logs nothing
  lightning Lightning as users run it: the same module logging its loss each step
            (`self.log(..., prog_bar=True)`), CSV logger, TQDM bar, ModelCheckpoint on val/acc,
            log_every_n_steps as trainwell's default (10)
  tw_user   `trainwell.training.run.train` with every default, on the `lightning` side's module
  tw_task   the same, with trainwell's own ClassificationTask (model=mlp, 32 input features)
  tw_lm     the same, with experiment=lm_accum on a tiny Transformer (its own workload: its
            figure is tracked on its own, not compared)
  bare_bf16_cl, tw_task_bf16_cl   `bare` and `tw_task` in bf16-mixed with channels_last
            (3x8x8 images in NHWC memory, a one-convolution net turned channels_last): the mode
            with the largest gap on the H100

Timed: epochs 2.. (the first pays one-off costs), from the start of each epoch's first batch to
the end of its last (validation and checkpoints excluded), per training batch, in microseconds,
on two clocks: the training thread's CPU time (`cpu`, the headline: what the Python of a step
costs, robust when neighbours load the machine) and wall time (`wall`). Ratios are per
repetition (every side under the same load), then the median across repetitions. The Lightning
sides run Lightning's own hook dispatch even after a trainwell side patched it.
Last line: `<side>_cpu_us=.. <side>_wall_us=.. ... tw_task_vs_bare=.. tw_user_vs_lightning=..
tw_task_vs_bare_bf16_cl=.. ..._wall=..` (ratios without a suffix are CPU; `_spread` =
half-range / median).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

if __name__ == "__main__":
    # Hydra instantiates `host_cost.X` by import: make that name this very module, so the timer's
    # results land where main() reads them.
    sys.modules.setdefault("host_cost", sys.modules["__main__"])
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import lightning as L
import torch
import torch.nn.functional as F
from harness import compose, figure, final_line, interleaved, parse_args
from hydra.utils import instantiate
from omegaconf import OmegaConf, open_dict
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FEATURES, CLASSES, HIDDEN = 32, 10, 64
IMAGE, CHANNELS = (3, 8, 8), 8  # the bf16 + channels_last sides' images and conv width
SIDES = (
    "raw",
    "bare",
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
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, CLASSES))


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


def task_optimization(params: Any, total_steps: int) -> tuple[Any, Any]:
    """The ClassificationTask's default optimizer and per-step schedule (model=mlp), built from
    the composed config as the task builds them: every side pays the same optimizer arithmetic."""
    if not _TASK_OPTIMIZATION:
        with tempfile.TemporaryDirectory(prefix="tw-host-cost-") as tmp:
            model = compose(["model=mlp"], Path(tmp)).model
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


def clocks() -> tuple[float, float]:
    # thread_time: CPU of the training thread only. On a loaded shared machine wall time also
    # measures the neighbours; the thread's CPU time is what its Python costs per step.
    return time.perf_counter(), time.thread_time()


class StepTimer(L.Callback):
    """Per epoch: first batch start -> last batch end, and the number of batches in between."""

    last: ClassVar[list[Epoch]] = []

    def __init__(self) -> None:
        self.epochs: list[Epoch] = []
        self._start = (0.0, 0.0)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if args[-1] == 0:  # batch_idx
            self._start = clocks()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if args[-1] + 1 == trainer.num_training_batches:
            wall, cpu = clocks()
            self.epochs.append((wall - self._start[0], cpu - self._start[1], args[-1] + 1))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        StepTimer.last = list(self.epochs)


def per_step_us(epochs: list[Epoch]) -> dict[str, float]:
    """Mean µs per batch over the epochs after the first: wall and training-thread CPU."""
    if not epochs:
        raise RuntimeError("host_cost: the fit ran no timed epoch (was the StepTimer installed?)")
    steady = epochs[1:] if len(epochs) > 1 else epochs
    batches = sum(n for _, _, n in steady)
    return {
        "wall": 1e6 * sum(w for w, _, _ in steady) / batches,
        "cpu": 1e6 * sum(c for _, c, _ in steady) / batches,
    }


def run_raw(epochs: int, samples: int) -> dict[str, float]:
    torch.manual_seed(0)
    data = VectorData(num_samples=samples)
    net = make_net()
    loader = data.train_dataloader()
    optimizer, schedule = task_optimization(net.parameters(), epochs * len(loader))
    timings: list[Epoch] = []
    for _ in range(epochs):
        (wall, cpu), n = clocks(), 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            schedule.step()
            n += 1
        end_wall, end_cpu = clocks()
        timings.append((end_wall - wall, end_cpu - cpu, n))
        with torch.no_grad():  # a validation pass, outside the timed window as on every side
            for x, _y in data.val_dataloader():
                net(x)
    return per_step_us(timings)


@contextmanager
def lightning_as_shipped() -> Iterator[None]:
    """Lightning's own hook dispatch for the Lightning sides: a trainwell run earlier in this
    process patched it (compat.skip_empty_callback_hooks, lean_module_hooks,
    cache_training_step_signature), which would flatter those sides."""
    from lightning.pytorch.loops import training_epoch_loop
    from lightning.pytorch.trainer import call

    names = [
        (call, "_call_callback_hooks"),
        (call, "_call_lightning_module_hook"),
        (call, "_call_strategy_hook"),
        (training_epoch_loop, "is_param_in_hook_signature"),
    ]
    patched = [(owner, name, getattr(owner, name)) for owner, name in names]
    for owner, name, fn in patched:
        setattr(owner, name, getattr(fn, "_trainwell_original", fn))
    try:
        yield
    finally:
        for owner, name, fn in patched:
            setattr(owner, name, fn)


def run_lightning(
    epochs: int, samples: int, tmp: Path, as_users_run_it: bool, bf16_cl: bool = False
) -> dict[str, float]:
    from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
    from lightning.pytorch.loggers import CSVLogger

    L.seed_everything(0, verbose=False)
    callbacks: list[L.Callback] = [StepTimer()]
    if bf16_cl:
        from loops import ChannelsLast

        callbacks.append(ChannelsLast())
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
    module = UserModule(log=as_users_run_it, cnn=bf16_cl)
    with lightning_as_shipped():
        trainer.fit(module, VectorData(num_samples=samples, images=bf16_cl))
    return per_step_us(StepTimer.last)


def trainwell_config(side: str, epochs: int, samples: int, tmp: Path) -> Any:
    overrides = LM_TINY if side == "tw_lm" else ["model=mlp"]
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
        cfg.callbacks.host_cost_timer = OmegaConf.create({"_target_": "host_cost.StepTimer"})
        if side == "tw_lm":
            return cfg
        cfg.data = OmegaConf.create(
            {"_target_": "host_cost.VectorData", "num_samples": samples, "batch_size": 16,
             "images": bf16_cl}
        )  # fmt: skip
        if side == "tw_user":
            cfg.model = OmegaConf.create({"_target_": "host_cost.UserModule"})
        elif bf16_cl:
            cfg.model.net = OmegaConf.create({"_target_": "host_cost.make_cnn"})
        else:
            cfg.model.net._args_[1].in_features = FEATURES
    return cfg


def run_trainwell(side: str, epochs: int, samples: int, tmp: Path) -> dict[str, float]:
    from trainwell.training.run import train

    StepTimer.last = []
    train(trainwell_config(side, epochs, samples, tmp))
    return per_step_us(StepTimer.last)


def run_side(side: str, epochs: int, samples: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tw-host-cost-") as tmp:
        if side == "raw":
            return run_raw(epochs, samples)
        if side in ("bare", "lightning", "bare_bf16_cl"):
            return run_lightning(
                epochs, samples, Path(tmp), as_users_run_it=side == "lightning",
                bf16_cl=side == "bare_bf16_cl",
            )  # fmt: skip
        return run_trainwell(side, epochs, samples, Path(tmp))


# (figure name, numerator side, denominator side): the targets compare these pairs.
RATIOS = (
    ("bare_vs_raw", "bare", "raw"),
    ("lightning_vs_bare", "lightning", "bare"),
    ("tw_user_vs_lightning", "tw_user", "lightning"),
    ("tw_task_vs_bare", "tw_task", "bare"),
    ("tw_task_vs_lightning", "tw_task", "lightning"),
    # bf16-mixed + channels_last (the mode with the largest GPU gap): the same figure
    ("tw_task_vs_bare_bf16_cl", "tw_task_bf16_cl", "bare_bf16_cl"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4, help="timed: the 2nd epoch on")
    parser.add_argument("--samples", type=int, default=4096, help="train samples (batch 16)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sides", default=",".join(SIDES), help="comma-separated subset")
    args = parse_args(parser, argv, "host cost per training step (near-zero compute, one thread)")
    import logging
    import warnings

    # One-line progress per repetition, not Lightning's banner per fit.
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    sides = [s for s in args.sides.split(",") if s]
    unknown = set(sides) - set(SIDES)
    if unknown:
        parser.error(f"unknown sides {sorted(unknown)}; choose from {','.join(SIDES)}")

    def side_fn(side: str) -> Any:
        return lambda: run_side(side, args.epochs, args.samples)

    def report(rep: int, results: dict[str, dict[str, float]]) -> None:
        line = " ".join(f"{k} {v['cpu']:.0f}/{v['wall']:.0f}" for k, v in results.items())
        print(f"[rep {rep}] us/step cpu/wall: {line}", flush=True)

    runs = interleaved({s: side_fn(s) for s in sides}, args.reps, report)
    figures: dict[str, float | int | str] = {}
    for clock in ("cpu", "wall"):
        for side in sides:
            values = [r[clock] for r in runs[side]]
            figure(figures, f"{side}_{clock}_us", values, f"{side} {clock} us/step", " us")
    for clock in ("cpu", "wall"):
        for name, num, den in RATIOS:
            if num in runs and den in runs:
                ratios = [a[clock] / b[clock] for a, b in zip(runs[num], runs[den], strict=True)]
                suffix = "" if clock == "cpu" else "_wall"
                label = f"{name} {clock} ({num} / {den}, per repetition)"
                figure(figures, f"{name}{suffix}", ratios, label, spread=True)
    final_line(**figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
