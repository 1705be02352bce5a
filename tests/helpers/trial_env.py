"""A callback that writes what a trial ran with (`trial_env.json` in its run dir): its devices,
threads, workers, when it trained and from which step; `mode=fail` / `mode=kill` end that trial
(a crash, a kill -9) as it starts training, `mode=hold` holds it after its first optimizer step
until its pre-emption handler has a signal (tests.helpers.hold). `once=true`: fail or kill on the
trial's first attempt only (a marker in its run dir), so the same sweep launched again runs it
through; a hold is once per run dir anyway. `meet=N`: each trial waits at its training's start
until N trials of its sweep have started (`met` in the record: False if it waited in vain), so a
sweep that runs them one at a time shows it."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from tests.helpers.hold import HoldUntilSignalled

ENDED_ONCE = "ended_once.txt"  # in the run dir: this trial was already failed or killed once
HELD = "held.txt"  # in the run dir: this trial was held (the cue to signal its sweep)


class TrialEnv(pl.Callback):
    def __init__(
        self, mode: str = "ok", meet: int = 0, wait_s: float = 120.0, once: bool = False
    ) -> None:
        if mode not in ("ok", "fail", "kill", "hold"):
            raise ValueError(f"unknown mode {mode}")
        self.mode, self.meet, self.wait_s, self.once = mode, meet, wait_s, once
        self.started, self.start_step, self.met = 0.0, 0, True
        self.hold: HoldUntilSignalled | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.mode == "hold":
            marker = Path(trainer.default_root_dir) / HELD
            self.hold = HoldUntilSignalled(str(marker), step=1, timeout_s=self.wait_s)
            self.hold.setup(trainer, pl_module, stage)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.started, self.start_step = time.time(), trainer.global_step
        if self.mode in ("fail", "kill"):
            ended = Path(trainer.default_root_dir) / ENDED_ONCE
            if not (self.once and ended.exists()):
                ended.write_text(f"{self.mode}\n")
                if self.mode == "fail":
                    raise RuntimeError("planted failure of this trial")
                os.kill(os.getpid(), signal.SIGKILL)
        if self.meet:
            sweep_dir = Path(trainer.default_root_dir).parent
            (sweep_dir / f".started_{os.getpid()}").touch()
            deadline = time.time() + self.wait_s
            while len(list(sweep_dir.glob(".started_*"))) < self.meet:
                if time.time() > deadline:
                    self.met = False
                    break
                time.sleep(0.1)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, i: int
    ) -> None:
        if self.hold is not None:
            self.hold.on_train_batch_end(trainer, pl_module, outputs, batch, i)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = trainer.train_dataloader
        record = {
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "torch_threads": torch.get_num_threads(),
            "num_workers": getattr(loader, "num_workers", None),
            "pid": os.getpid(),
            "met": self.met,
            "train_start": self.started,
            "start_step": self.start_step,
            "train_end": time.time(),
        }
        (Path(trainer.default_root_dir) / "trial_env.json").write_text(json.dumps(record))
