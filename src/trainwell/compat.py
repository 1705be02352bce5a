"""Every workaround of an upstream Lightning / torch behaviour, in one place.

Each entry names what it corrects, the upstream report and the versions seen, and has a test in
tests/test_compat.py that fails once upstream changes the behaviour (then delete the entry and
its callers). Private Lightning and torch attributes are used here and nowhere else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
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

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Resumed from a checkpoint of finished training (a kill landed after best.ckpt but
        # before last.ckpt reached the disk), FitLoop.run skips training and no train hook runs:
        # last.ckpt would keep an older state while results.json names it the final one.
        if trainer.global_step == self._last_global_step_saved or trainer.sanity_checking:
            return
        own_file = Path(self.dirpath or ".") / f"{self.filename}{self.FILE_EXTENSION}"
        resumed_from = trainer.ckpt_path
        if resumed_from and Path(resumed_from).resolve() == own_file.resolve():
            return  # last.ckpt already holds this state
        self._save_none_monitor_checkpoint(trainer, self._monitor_candidates(trainer))


# ---------------------------------------------------------------------------------------------
# A checkpoint written at the end of an epoch's last training batch, before that epoch's
# validation, resumes past the validation: on restart Lightning 2.6 counts an epoch whose last
# batch is done as finished (FitLoop.reset: restarted mid-epoch on the last batch -> processed
# and completed) and never validates it, so val metrics, the best checkpoint and early stopping
# miss an epoch. StepCheckpoint skips that batch; the end-of-epoch checkpoint follows it.
# ---------------------------------------------------------------------------------------------


def at_epoch_last_batch(trainer: L.Trainer) -> bool:
    return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)


class StepCheckpoint(ModelCheckpoint):
    """ModelCheckpoint(every_n_train_steps=N) that writes only right after an optimizer step
    (never inside an accumulation window, even when it skipped the step's own batch) and never
    at an epoch's last batch."""

    _stepped_at = -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._stepped_at = trainer.global_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        stepped = trainer.global_step != self._stepped_at
        self._stepped_at = trainer.global_step
        if stepped and not at_epoch_last_batch(trainer):
            super().on_train_batch_end(trainer, pl_module, *args, **kwargs)


# ---------------------------------------------------------------------------------------------
# On a restart, FitLoop.setup_data builds the train iterator *before* the sampler's epoch is set
# (Lightning-AI/pytorch-lightning#21938, open; 2.5.3-2.6.6), so a resumed epoch is drawn in the
# order of epoch 0 whenever the loader fixes its order when the iterator is created (worker
# processes, or the template's sharded batch sampler).
# ---------------------------------------------------------------------------------------------


def restore_train_loader_position(trainer: L.Trainer) -> None:
    """Rebuild the resumed epoch's train iterator after setting its sampler epoch (and after the
    saved loader position, when Lightning left it pending, has been applied)."""
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


# ---------------------------------------------------------------------------------------------
# ModelParallelStrategy (FSDP2) loading a full, non-sharded checkpoint re-keys each optimizer's
# state by looking at its first entry, and raises IndexError when the optimizer keeps no
# per-parameter state at all (plain SGD): `_rekey_optimizer_state_if_needed`, Lightning 2.6.6
# (no upstream report found; related: Lightning-AI/pytorch-lightning#21357). Testing the best
# checkpoint after an FSDP fit, or resuming one, then fails. Such optimizers have only their
# hyper-parameters to restore, which this does itself.
# ---------------------------------------------------------------------------------------------


def load_model_parallel_checkpoint(
    strategy: Any, path: Any, load: Any, weights_only: bool | None
) -> dict[str, Any]:
    """`load(path, weights_only)` is ModelParallelStrategy.load_checkpoint of `strategy`."""
    from pathlib import Path

    path = Path(strategy.broadcast(path))
    if not (path.is_file() and strategy.optimizers):
        return load(path, weights_only)
    saved = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
    states = saved.get("optimizer_states", [])
    if not states or any(s.get("state") for s in states):
        return load(path, weights_only)
    optimizers, strategy.optimizers = strategy.optimizers, []
    try:
        checkpoint = load(path, weights_only)
    finally:
        strategy.optimizers = optimizers
    for optimizer, state in zip(optimizers, states, strict=True):
        for group, saved_group in zip(optimizer.param_groups, state["param_groups"], strict=True):
            group.update({k: v for k, v in saved_group.items() if k != "params"})
    return checkpoint


# ---------------------------------------------------------------------------------------------
# A checkpoint written after an epoch's last training batch but before its end (at the end of
# that epoch's validation, where ModelCheckpoint writes) resumes past that epoch's end: Lightning
# 2.6 counts the epoch as finished on restart (FitLoop.reset) and never runs its
# on_train_epoch_end, where it computes and resets the metrics logged with on_epoch=True. Their
# states would leak into the next epoch, and the epoch's own values would never be logged. The
# template snapshots those values and leaves those states out of such a checkpoint; reading
# which metrics Lightning will reset needs its private result collection.
# ---------------------------------------------------------------------------------------------


def epoch_end_pending(trainer: L.Trainer) -> bool:
    """After the training epoch's last batch, before Lightning's epoch-end logging has run."""
    fit_loop = trainer.fit_loop
    progress = fit_loop.epoch_progress.current
    return bool(
        trainer.training
        and not trainer.sanity_checking
        and fit_loop.epoch_loop.batch_progress.is_last_batch
        and progress.completed < progress.started
    )


def epoch_logged_metrics(trainer: L.Trainer) -> dict[str, Any]:
    """Metric objects logged in training with on_epoch=True, by the name Lightning logs their
    epoch value under (Lightning computes and resets them when the training epoch ends)."""
    found = {}
    for result in trainer.fit_loop.epoch_loop._results.values():
        if not result.is_tensor and result.meta.on_epoch:
            found[result.meta.forked_name(on_step=False)] = result.value
    return found


# ---------------------------------------------------------------------------------------------
# What `self.log` recorded, and how Lightning will reduce it. Lightning keeps each logged value's
# metadata (the hook it was logged from, on_step / on_epoch, reduce_fx, sync_dist) and, for a
# plain tensor with a mean reduction, its running `sum(value x batch_size)` and the batch sizes'
# sum only in private objects: `Trainer._results` (a `_ResultCollection` of `_ResultMetric`s with
# `.meta`, `.is_tensor`, `.value`, `.cumulated_batch_size`; Lightning 2.0-2.6.6). No public API
# exposes them; the doctor reads them to find means that ranks or batches would weigh wrongly
# (an epoch-end mean of per-rank means, a batch_size that is not what the value averages over).
# tests/test_compat.py fails when the structure changes.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoggedValue:
    """One `self.log` key as Lightning holds it in the running loop."""

    name: str
    hook: str  # training_step, on_validation_epoch_end, ...
    on_step: bool
    on_epoch: bool
    reduce: str  # mean | sum | max | min
    sync_dist: bool
    is_metric: bool  # a torchmetrics Metric was logged (it reduces itself across ranks)
    total: float | None  # plain tensors: the running sum (x batch size for a mean)
    batch_sizes: float | None  # plain tensors with a mean: the running sum of batch sizes


def logged_values(trainer: L.Trainer) -> list[LoggedValue]:
    """What the active loop (training, or the validation/test loop running now) has logged."""
    results = trainer._results
    if results is None:
        return []
    out = []
    for metric in results.values():
        meta = metric.meta
        plain = bool(metric.is_tensor)
        mean = bool(meta.is_mean_reduction)
        value = metric.value if plain else None
        out.append(
            LoggedValue(
                name=meta.name,
                hook=meta.fx,
                on_step=bool(meta.on_step),
                on_epoch=bool(meta.on_epoch),
                reduce=getattr(meta.reduce_fx, "__name__", str(meta.reduce_fx)),
                sync_dist=bool(meta.sync.should),
                is_metric=not plain,
                total=float(value) if value is not None and value.numel() == 1 else None,
                batch_sizes=float(metric.cumulated_batch_size) if plain and mean else None,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# `self.log(..., on_epoch=True, sync_dist=True)` of a mean: Lightning syncs the running sum of
# value x batch size and the running sum of batch sizes, the latter as an int64 tensor, with a
# *mean* across ranks. Mean-syncing an integer floors (gloo: the divided result is copied back
# into the integer tensor; NCCL: integer AVG), so whenever the batch sizes' total does not divide
# by the world size every such metric is inflated (Lightning-AI/pytorch-lightning#21859, open;
# 2.6.x; the fix proposed upstream, #21839, syncs the sizes in the value's dtype, as here).
# ---------------------------------------------------------------------------------------------


def exact_logged_means() -> None:
    """Patch Lightning's logged-result reduction once per process (idempotent)."""
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric

    if getattr(_ResultMetric.compute, "_trainwell_exact", False):
        return
    original = _ResultMetric.compute

    def compute(self: Any) -> torch.Tensor:
        if self.is_tensor and self.meta.is_mean_reduction:
            value = self.meta.sync(self.value.clone())
            sizes = self.meta.sync(self.cumulated_batch_size.to(value.dtype))
            return value / sizes
        return original(self)

    compute._trainwell_exact = True  # type: ignore[attr-defined]
    _ResultMetric.compute = compute  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------------
# Under DDP Lightning 2.6 broadcasts a "received SIGTERM" flag from rank 0 before *every*
# training batch and reads it on the host (`_TrainingEpochLoop._broadcast_sigterm_tensor`):
# one collective and one host sync per micro-batch (Lightning-AI/pytorch-lightning#21487; fix
# proposed in #21640). The template's PreemptionCallback owns SIGTERM (Lightning's flag is never
# set) and agrees on pre-emption every N steps instead, so the per-batch broadcast is skipped.
# ---------------------------------------------------------------------------------------------


def skip_per_batch_sigterm_broadcast(trainer: L.Trainer) -> None:
    trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor = lambda: None  # type: ignore[method-assign]
