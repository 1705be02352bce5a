"""A Hydra callback that makes each job of a sweep wait, as it starts (before the task function
builds anything), until `count` jobs of the sweep have started; it writes `meet.json` in the
job's dir (`met`: False if it waited in vain). Unlike tests.helpers.trial_env's `meet`, a job that
fails while building its model still takes part: a sweep that runs its jobs one at a time shows
it in every job, the failing one included. Set with `+hydra.callbacks.meet._target_=...`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class MeetAtJobStart(Callback):
    def __init__(self, count: int = 2, wait_s: float = 120.0) -> None:
        self.count, self.wait_s = count, wait_s

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        job_dir = Path(config.hydra.runtime.output_dir)
        sweep_dir = job_dir.parent
        (sweep_dir / f".joined_{os.getpid()}").touch()
        deadline, met = time.time() + self.wait_s, True
        while len(list(sweep_dir.glob(".joined_*"))) < self.count:
            if time.time() > deadline:
                met = False
                break
            time.sleep(0.1)
        (job_dir / "meet.json").write_text(json.dumps({"met": met, "pid": os.getpid()}))
