"""OmegaConf resolvers the config tree uses; registered on import (before Hydra composes)."""

from __future__ import annotations

import os
import secrets

from omegaconf import OmegaConf

_PROCESS_RUN_ID = f"{os.getpid():x}{secrets.token_hex(2)}"


def run_id() -> str:
    """Identifies this run: the SLURM job id when there is one (a requeued job gets the same id),
    else pid + random, so two runs started in the same second never share a run dir."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        return f"slurm{job}" + (f"_{task}" if task else "")
    return _PROCESS_RUN_ID


def register() -> None:
    if not OmegaConf.has_resolver("tw.run_id"):
        OmegaConf.register_new_resolver("tw.run_id", run_id, use_cache=True)


register()
