"""OmegaConf resolvers the config tree uses; registered on import (before Hydra composes)."""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from trainwell.errors import TrainwellError, missing_module_line

# Computed once per process: every interpolation of the run id in one run agrees.
_LOCAL_RUN_ID = f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid():x}{secrets.token_hex(2)}"


def launch_dir() -> str:
    """The directory the command started in (hydra:runtime.cwd), readable before Hydra has set up
    a job: a multirun resolves its sweep dir (under logs/) and its sweeper's settings then, when
    `${hydra:runtime.cwd}` would raise "HydraConfig was not set"."""
    return os.getcwd()


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


def sweep_job() -> tuple[str, str] | None:
    """(sweep dir name, job number) while resolving inside a multirun job, else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    hydra_cfg = HydraConfig.get()
    return Path(str(hydra_cfg.sweep.dir)).name, str(hydra_cfg.job.num)


def wandb_id(task_name: str, output_dir: str) -> str:
    """A wandb run id derived from the run dir, so a resumed run logs into the same wandb run.
    A sweep's job dirs are all named by their job number: the sweep's name keeps two sweeps'
    job 0 apart."""
    job = sweep_job()
    raw = f"{task_name}-{job[0]}-{job[1]}" if job else f"{task_name}-{Path(output_dir).name}"
    return re.sub(r"[^A-Za-z0-9_-]", "-", raw)[:120]


def sweep_name() -> str:
    """The sweep dir's name inside a multirun job (a wandb group: one per sweep), else ""."""
    job = sweep_job()
    return job[0] if job else ""


def sweep_job_suffix() -> str:
    """`-<job number>` inside a multirun job (tells a sweep's runs apart by name), else ""."""
    job = sweep_job()
    return f"-{job[1]}" if job else ""


def num_classes(data: Any) -> int:
    """The classes the datamodule declares: its config's `num_classes` (a datamodule that takes
    the number as an argument), else a positive int `num_classes` attribute of its class. The
    task's `model.num_classes` can default to it (`${tw.num_classes:${data}}`): written once."""
    declared = data.get("num_classes") if isinstance(data, DictConfig) else None
    target = str(data.get("_target_", "")) if isinstance(data, DictConfig) else ""
    if declared is None and target:
        try:
            declared = getattr(get_class(target), "num_classes", None)
        except Exception as err:  # an unimportable class: said by key here, as it resolves first
            missing = missing_module_line(err)
            if missing is not None:  # no number set by hand would help
                raise TrainwellError(f"data._target_={target}: {missing}") from err
            raise TrainwellError(
                f"model.num_classes: cannot read num_classes from data._target_={target} "
                f"({type(err).__name__}); set model.num_classes=<number of classes>"
            ) from err
    if isinstance(declared, bool) or not isinstance(declared, int) or declared < 1:
        raise TrainwellError(
            f"model.num_classes: the datamodule {target or '(no _target_)'} declares no "
            f"num_classes (found {declared!r}); give it a `num_classes = <n>` class attribute "
            "or set model.num_classes=<n>"
        )
    return declared


def register() -> None:
    if not OmegaConf.has_resolver("tw.launch_dir"):
        OmegaConf.register_new_resolver("tw.launch_dir", launch_dir, use_cache=True)
    if not OmegaConf.has_resolver("tw.run_id"):
        OmegaConf.register_new_resolver("tw.run_id", run_id, use_cache=True)
    if not OmegaConf.has_resolver("tw.wandb_id"):
        OmegaConf.register_new_resolver("tw.wandb_id", wandb_id)
    if not OmegaConf.has_resolver("tw.sweep_name"):
        OmegaConf.register_new_resolver("tw.sweep_name", sweep_name)
    if not OmegaConf.has_resolver("tw.num_classes"):
        OmegaConf.register_new_resolver("tw.num_classes", num_classes)
    if not OmegaConf.has_resolver("tw.sweep_job_suffix"):
        OmegaConf.register_new_resolver("tw.sweep_job_suffix", sweep_job_suffix)


register()
