"""A callback that writes what a trial ran with (`trial_env.json` in its run dir): its devices,
threads, workers and when it trained; `mode=fail` / `mode=kill` end that trial (a crash, a
kill -9) as it starts training. `meet=N`: each trial waits at its training's start until N trials
of its sweep have started (`met` in the record: False if it waited in vain), so a sweep that runs
them one at a time shows it."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import lightning.pytorch as pl
import torch


class TrialEnv(pl.Callback):
    def __init__(self, mode: str = "ok", meet: int = 0, wait_s: float = 120.0) -> None:
        self.mode, self.meet, self.wait_s = mode, meet, wait_s
        self.started, self.met = 0.0, True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.started = time.time()
        if self.mode == "fail":
            raise RuntimeError("planted failure of this trial")
        if self.mode == "kill":
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
            "train_end": time.time(),
        }
        (Path(trainer.default_root_dir) / "trial_env.json").write_text(json.dumps(record))
