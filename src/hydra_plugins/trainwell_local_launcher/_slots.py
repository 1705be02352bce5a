"""How a machine is shared out among trials running at once: GPUs, CPU threads, loader workers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Slot:
    gpus: tuple[str, ...]  # CUDA_VISIBLE_DEVICES of its trials; () hides every GPU
    threads: int  # CPU threads of its trials (OMP / torch intra-op); also their worker cap

    def env(self) -> dict[str, str]:
        threads = str(self.threads)
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(self.gpus),
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
        }


def machine_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set (ids, UUIDs or MIG names
    pass through as written), else every GPU the driver counts."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [gpu.strip() for gpu in visible.split(",") if gpu.strip()]
    import torch  # only here: counting GPUs needs it, scanning the plugin must not

    return [str(i) for i in range(torch.cuda.device_count())]


def machine_cpus() -> int:
    return len(os.sched_getaffinity(0))


def plan_slots(gpus: list[str], gpus_per_trial: int, slots: int | None, cpus: int) -> list[Slot]:
    """`slots` slots (default: one per group of `gpus_per_trial` GPUs, else 1), slot k on GPU
    group k mod groups, each with an equal share of the CPUs. Bad settings raise ValueError."""
    if gpus_per_trial < 1:
        raise ValueError(f"hydra.launcher.gpus_per_trial={gpus_per_trial}: give 1 or more")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"hydra.launcher.gpus={gpus} names a GPU twice")
    groups = [
        tuple(gpus[i : i + gpus_per_trial])
        for i in range(0, len(gpus) - gpus_per_trial + 1, gpus_per_trial)
    ]
    if gpus and not groups:
        raise ValueError(
            f"hydra.launcher.gpus_per_trial={gpus_per_trial} but only {len(gpus)} GPUs "
            f"({','.join(gpus)})"
        )
    count = slots if slots is not None else max(len(groups), 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"hydra.launcher.slots={slots}: give 1 or more trials at once")
    threads = max(cpus // count, 1)
    return [Slot(groups[k % len(groups)] if groups else (), threads) for k in range(count)]


def cap_workers(cfg: Any, threads: int) -> str | None:
    """Cap the trial config's `data.num_workers` at its slot's threads, so every trial's workers
    together stay within the machine's CPUs (results do not depend on num_workers: fewer change
    only the speed); the line saying so, or None when nothing changed."""
    from omegaconf import OmegaConf, open_dict

    workers = OmegaConf.select(cfg, "data.num_workers")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers <= threads:
        return None
    with open_dict(cfg):
        cfg.data.num_workers = threads
    return f"local launcher: data.num_workers={workers} -> {threads} (this trial's CPU share)"
