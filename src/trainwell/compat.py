"""Every workaround of an upstream Lightning / torch behaviour, in one place.

Each entry names what it corrects, the upstream report and the versions seen, and has a test in
tests/test_compat.py that fails once upstream changes the behaviour (then delete the entry and
its callers). Private Lightning and torch attributes are used here and nowhere else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.data import _set_sampler_epoch
from lightning.pytorch.callbacks import ModelCheckpoint

# ---------------------------------------------------------------------------------------------
# Lightning divides every micro-batch loss by accumulate_grad_batches, the short tail window of
# an epoch included (Lightning-AI/pytorch-lightning#19987, open; seen in 2.0-2.6.6). The exact
# accumulation callback undoes exactly this divisor; if upstream starts dividing the tail by its
# own length, this function must change with it (tests/test_compat.py watches the behaviour).
# ---------------------------------------------------------------------------------------------


def lightning_loss_divisor(trainer: L.Trainer) -> int:
    """What Lightning divided the loss of the current micro-batch by before backward."""
    return int(trainer.accumulate_grad_batches)


# ---------------------------------------------------------------------------------------------
# ModelCheckpoint(save_last=True) writes last.ckpt only when a top-k checkpoint was written at the
# same step (Lightning 2.6.0-2.6.6, model_checkpoint.py on_validation_end / on_train_epoch_end;
# reported downstream in openclimatefix/pvnet#542). With save_top_k=1 last.ckpt is then a copy of
# the *best* epoch, several epochs old. LastCheckpoint is a second, unmonitored checkpoint that
# overwrites last.ckpt after every epoch and once more when training ends.
# ---------------------------------------------------------------------------------------------


class LastCheckpoint(ModelCheckpoint):
    """`<dirpath>/last.ckpt`: always the newest end-of-epoch (or end-of-training) state."""

    def __init__(self, dirpath: str, filename: str = "last") -> None:
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            monitor=None,
            save_top_k=1,
            save_last=False,
            auto_insert_metric_name=False,
            enable_version_counter=False,
        )

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # max_steps can end training mid-epoch, after the last end-of-epoch save.
        if trainer.global_step != self._last_global_step_saved and not trainer.sanity_checking:
            self._save_none_monitor_checkpoint(trainer, self._monitor_candidates(trainer))


# ---------------------------------------------------------------------------------------------
# Trainer.estimated_stepping_batches (which configure_optimizers calls to size an LR schedule)
# builds the train loader and its iterator *before* a checkpoint is restored; the loader state
# saved in the checkpoint then waits in fit_loop._combined_loader_states_to_load and is never
# applied, so a mid-epoch resume restarts the epoch from its first batch
# (Lightning-AI/pytorch-lightning#20550, open; seen in 2.4-2.6.6).
# ---------------------------------------------------------------------------------------------


def restore_train_loader_position(trainer: L.Trainer) -> None:
    """Apply the saved loader state (when Lightning left it pending) and rebuild the iterator
    with the resumed epoch's sampler epoch."""
    fit_loop = trainer.fit_loop
    if fit_loop._combined_loader is None or not fit_loop.restarting:
        return
    if fit_loop._combined_loader_states_to_load:
        fit_loop._load_combined_loader_states()
    epoch = fit_loop.epoch_progress.current.processed
    for loader in fit_loop._combined_loader.flattened:
        # Before iter(): with workers the sampler is consumed when the iterator is built.
        set_sampler_epoch(loader, epoch)
    iter(fit_loop._data_fetcher)


def set_sampler_epoch(loader: object, epoch: int) -> None:
    """Lightning's own per-epoch `set_epoch` call on a loader's samplers."""
    _set_sampler_epoch(loader, epoch)


# ---------------------------------------------------------------------------------------------
# torch has no public "multiply a list of tensors in place"; the fused foreach kernel is one
# launch for all gradients instead of one per tensor (the accumulation scale runs every step).
# ---------------------------------------------------------------------------------------------


def mul_tensors_(tensors: Sequence[torch.Tensor], factor: float | torch.Tensor) -> None:
    if tensors:
        torch._foreach_mul_(list(tensors), factor)


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


def end_multirun_job(env_before: dict[str, str | None]) -> None:
    """Undo what Lightning's DDP launch left behind before the sweep's next job starts."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.instance().cfg is None or HydraConfig.get().mode != RunMode.MULTIRUN:
        return
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    finish_wandb_run()
    for key, value in env_before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


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


__all__ = [
    "LastCheckpoint",
    "end_multirun_job",
    "finish_wandb_run",
    "launcher_env",
    "lightning_loss_divisor",
    "mul_tensors_",
    "pin_multirun_job_for_ddp_children",
    "refuse_torchrun_restart_on_shared_store",
    "restore_train_loader_position",
    "set_sampler_epoch",
]


# ---------------------------------------------------------------------------------------------
# torchmetrics keeps a metric's update count in a private attribute and caches compute(); neither
# comes back with its states (torchmetrics 1.x: `Metric._update_count`, `Metric._computed`), and
# an aggregation metric registers its states as non-persistent, so MaxMetric (a best-so-far
# score) is not in a checkpoint at all. The template saves every metric's states itself.
# ---------------------------------------------------------------------------------------------


def metric_states(metric: Any) -> dict[str, Any]:
    return {"states": dict(metric.metric_state), "update_count": int(metric.update_count)}


def restore_metric_states(metric: Any, saved: dict[str, Any]) -> None:
    for name, value in saved["states"].items():
        if isinstance(value, torch.Tensor):
            value = value.to(metric.device)
        elif isinstance(value, list):
            value = [v.to(metric.device) if isinstance(v, torch.Tensor) else v for v in value]
        setattr(metric, name, value)
    metric._update_count = int(saved["update_count"])
    metric._computed = None
