"""OmegaConf resolvers the config tree uses; registered on import (before Hydra composes)."""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from omegaconf import OmegaConf

# Computed once per process: every interpolation of the run id in one run agrees.
_LOCAL_RUN_ID = f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid():x}{secrets.token_hex(2)}"


def slurm_run_id() -> str | None:
    """`slurm<job id>` (`slurm<array job>_<task>` for arrays): the same on every requeue."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"slurm{array_job}_{task}"
    job = os.environ.get("SLURM_JOB_ID")
    return f"slurm{job}" if job else None


def run_id(explicit: str | None = None) -> str:
    """Names the run dir: `run_id=<name>` if given, else the SLURM job, else time + pid + random."""
    if explicit not in (None, "", "null"):
        return str(explicit)
    return slurm_run_id() or _LOCAL_RUN_ID


def wandb_id(task_name: str, output_dir: str) -> str:
    """A wandb run id derived from the run dir, so a resumed run logs into the same wandb run."""
    raw = f"{task_name}-{Path(output_dir).name}"
    return re.sub(r"[^A-Za-z0-9_-]", "-", raw)[:120]


def register() -> None:
    if not OmegaConf.has_resolver("tw.run_id"):
        OmegaConf.register_new_resolver("tw.run_id", run_id, use_cache=True)
    if not OmegaConf.has_resolver("tw.wandb_id"):
        OmegaConf.register_new_resolver("tw.wandb_id", wandb_id)


register()
