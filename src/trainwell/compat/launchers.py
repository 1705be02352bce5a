"""Launching: Lightning's DDP launcher under a Hydra multirun, torchrun restarts, and wandb runs of
sweep jobs that share one process."""

from __future__ import annotations

import gc
import os
import sys

# ---------------------------------------------------------------------------------------------
# Lightning's DDP launcher under a Hydra multirun (Lightning 2.6.6, `_hydra_subprocess_cmd`):
# ranks > 0 are started with the parent's sys.argv plus `hydra.run.dir=<hydra.run.dir>`. In a
# multirun that argv still holds `-m` and the sweep, so every extra rank would launch the whole
# sweep, in another directory than its job's. And between the jobs of one basic-launcher sweep
# (one process) Lightning neither destroys its process group nor unsets the LOCAL_RANK /
# WORLD_SIZE / ... it exported, so job 2 would wait for job 1's departed ranks.
# ---------------------------------------------------------------------------------------------

LAUNCHER_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


def pin_multirun_job_for_ddp_children() -> None:
    """Make Lightning's DDP launcher re-run *this job*, in *this job's* dir, under multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import read_write

    hydra_cfg = HydraConfig.instance().cfg
    if hydra_cfg is None or HydraConfig.get().mode != RunMode.MULTIRUN:
        return
    sys.argv = [sys.argv[0], *HydraConfig.get().overrides.task]
    output_dir = HydraConfig.get().runtime.output_dir
    # Hydra marks each level read-only on its own: lift the flag on every node on the way down.
    with read_write(hydra_cfg), read_write(hydra_cfg.hydra), read_write(hydra_cfg.hydra.run):
        hydra_cfg.hydra.run.dir = output_dir


def end_job(env_before: dict[str, str | None]) -> None:
    """Close the job's process group; under multirun also undo what Lightning's DDP launch left
    behind before the sweep's next job starts."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    release_process_group()
    if HydraConfig.instance().cfg is None or HydraConfig.get().mode != RunMode.MULTIRUN:
        return
    finish_wandb_run()
    for key, value in env_before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def release_process_group() -> None:
    """Free what holds the process group, then destroy it, while the interpreter still runs.

    Lightning never destroys the group it creates. The trainer, its strategy and the DDP-wrapped
    model reference each other, so they (and the gloo/NCCL group they hold) outlive the job until
    the interpreter exits; torch then tears the group down in whatever order its objects go, and
    a gloo worker thread can abort the finished process ("terminate called without an active
    exception", SIGABRT): a run that trained and saved everything exits non-zero.
    """
    torch = sys.modules.get("torch")  # a job that never imported torch holds no process group
    if torch is None or not (
        torch.distributed.is_available() and torch.distributed.is_initialized()
    ):
        return
    gc.collect()  # the reference cycles that still hold the wrapped model
    torch.distributed.destroy_process_group()


def launcher_env() -> dict[str, str | None]:
    return {key: os.environ.get(key) for key in LAUNCHER_ENV}


# ---------------------------------------------------------------------------------------------
# torchrun --max-restarts: a restarted worker group joins the rendezvous' shared TCPStore, which
# still holds the previous round's keys (the env:// rendezvous adds no per-attempt prefix when the
# agent's store is shared; torch 2.14.1 seen here, the NCCL form of the failure is
# pytorch/pytorch#167288, open). Restarted trainwell ranks then failed to set up their process
# group: gloo "connectFullMesh ... Connection refused" to addresses of the previous round's ranks
# (NCCL retries for minutes). Launching torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 gives
# every round its own store; without it a restarted worker stops at once with that fix as its
# one-line error.
# ---------------------------------------------------------------------------------------------

TORCHRUN_FRESH_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def refuse_torchrun_restart_on_shared_store() -> None:
    from trainwell.errors import TrainwellError

    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if restart not in ("", "0") and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        raise TrainwellError(
            f"torchrun restarted this worker group (restart {restart}) on the store of the "
            "previous round, whose process-group addresses are stale (pytorch/pytorch#167288); "
            f"launch torchrun with {TORCHRUN_FRESH_STORE}=1 in its environment"
        )


# ---------------------------------------------------------------------------------------------
# WandbLogger reuses a wandb run still in progress ("There is a wandb run already in progress and
# newly created instances of `WandbLogger` will reuse this run", Lightning 2.0-2.6.6,
# loggers/wandb.py `experiment`; Lightning-AI/pytorch-lightning#5212) and never finishes its own
# run. In a sweep whose jobs share one process (Hydra's basic launcher, the Optuna sweeper) every
# job after the first would log into the first job's run: the run ends with its job instead.
# ---------------------------------------------------------------------------------------------


def finish_wandb_run() -> None:
    wandb = sys.modules.get("wandb")  # not imported here: a run without wandb never pays for it
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
