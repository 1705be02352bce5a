"""The one place a Trainer, its callbacks and its loggers are built (train, eval and the doctor).

`template_callbacks` lists everything a training run installs; `build_trainer` adds no callback
of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.utilities import rank_zero_info
from omegaconf import DictConfig, OmegaConf

from trainwell import compat
from trainwell.callbacks.accumulation import ExactAccumulation
from trainwell.callbacks.checkpoint_rehearsal import CheckpointRehearsal
from trainwell.callbacks.ema import ema_callbacks
from trainwell.callbacks.learning_rate import LearningRateLogger
from trainwell.callbacks.preemption import PreemptionCheckpoint
from trainwell.callbacks.training_state import ExactResume
from trainwell.callbacks.validation_history import ValidationHistory
from trainwell.io.background_writes import BackgroundCheckpointWrites
from trainwell.io.checkpoint_write import AtomicCheckpointIO
from trainwell.training.monitored_metric import MonitoredMetricCheck
from trainwell.training.plan_callback import TrainingPlanner
from trainwell.training.precision import configure_matmul, resolve_precision

# Callbacks that only write to a logger: with `logger=[]` / `logger=null` they are left out
# (LearningRateMonitor would refuse to start), and the run says so.
_NEED_A_LOGGER = (LearningRateMonitor, LearningRateLogger)


def build_loggers(cfg: DictConfig) -> list[Any]:
    return [instantiate(c) for c in (cfg.get("logger") or {}).values() if c is not None]


def build_callbacks(cfg: DictConfig, has_logger: bool = True) -> list[L.Callback]:
    callbacks = []
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is None:
            continue
        callback = instantiate(node)
        if not has_logger and isinstance(callback, _NEED_A_LOGGER):
            rank_zero_info(
                f"callbacks.{name} left out: it writes to a logger and this run has none"
            )
            continue
        callbacks.append(callback)
    return callbacks


def template_callbacks(
    cfg: DictConfig, run_dir: Path, plan: TrainingPlanner, has_logger: bool = True
) -> list[L.Callback]:
    """Everything a training run installs, in the order Lightning calls them, except that
    Lightning moves every checkpoint callback (ModelCheckpoint and its subclasses from
    conf/callbacks/) after all the others: they save once every other callback's hook has run.

    1. ExactAccumulation (callbacks/accumulation.py), first: every micro-batch weighs by its
       share of the window's items, the short tail window included, and every later gradient
       hook (clipping, norms, the guards) sees the final gradients.
    2. `plan` (training/plan_callback.py): the training arithmetic, computed before the first
       step, printed and saved; the LR scaled and the schedule's length fixed from it; a resume
       with another effective batch refused.
    3. ExactResume (callbacks/training_state.py): RNG streams, metric states, logged running
       means and the loader position go into every checkpoint and come back on resume.
    4. ExactEMA (callbacks/ema.py), with `ema.decay` set (conf/callbacks/_ema.yaml): the
       weights' moving average, updated once per optimizer step before any checkpoint of that
       step is written; validation and every checkpoint's state_dict hold the average.
    5. MonitoredMetricCheck (training/monitored_metric.py), then conf/callbacks/: the
       monitored metric checked at the first validation, before early stopping reads it (a
       module that logs none trains without best.ckpt and early stopping; one that logs others
       is refused, exit 2); best/last/step checkpoints, early stopping, the guards (non-finite,
       train mode), gradient-norm / LR / throughput logging, progress bar, model summary. A
       callback that only writes to a logger is left out when the run has none.
       ValidationHistory (callbacks/validation_history.py) sits before them: each validation's
       values, in every checkpoint, so results.json reports the best checkpoint's epoch.
    6. PreemptionCheckpoint (callbacks/preemption.py): SIGTERM / SIGUSR1 -> a checkpoint at the
       next window boundary, exit 3.
    7. BackgroundCheckpointWrites (io/background_writes.py): checkpoints are written off the
       training thread inside the training loop, and every write is on disk when it ends.
    8. CheckpointRehearsal (callbacks/checkpoint_rehearsal.py), last before the checkpoint
       callbacks: at train start, with every other callback started, the checkpoint a later
       save writes is written into memory and read back; a value it cannot hold stops the run
       before the first training step.
    """
    return [
        ExactAccumulation(),
        plan,
        ExactResume(),
        *ema_callbacks(cfg),
        MonitoredMetricCheck(),
        ValidationHistory(OmegaConf.select(cfg, "monitor.metric")),
        *build_callbacks(cfg, has_logger=has_logger),
        PreemptionCheckpoint(run_dir / "checkpoints"),
        BackgroundCheckpointWrites(),
        CheckpointRehearsal(),
    ]


def probe_callbacks(callbacks: list[L.Callback]) -> list[L.Callback]:
    """`callbacks` between the two of template_callbacks that change what a short fit computes
    and writes (exact accumulation, background checkpoint writes): the doctor's probes train as
    a run does."""
    return [ExactAccumulation(), *callbacks, BackgroundCheckpointWrites()]


def build_trainer(cfg: DictConfig, **overrides: Any) -> L.Trainer:
    """The configured Trainer with the template's fixed parts (callbacks come from the caller:
    template_callbacks for a training run).

    * `use_distributed_sampler=False`: the template shards loaders itself, without the padding
      Lightning's DistributedSampler adds (loading/sharding.py);
    * every checkpoint read or written goes through AtomicCheckpointIO: atomic writes, off the
      training thread during the training loop (io/checkpoint_write.py), and loads with
      weights_only=True whatever a caller asks for (io/checkpoint_read.py);
    * `trainer.precision` resolved (auto, and no silent fp16 -> bf16 on CPU);
    * logged means synced across ranks without Lightning's integer flooring (compat);
    * Lightning's advertisement for its cloud logger is not printed, nor its own deprecated use
      of a torch API (compat);
    * a callback costs nothing in a hook it does not implement, and no hook pays for a profiler
      that is not set (compat).
    """
    compat.drop_logger_advert()
    compat.silence_lightning_leafspec_warning()
    compat.exact_logged_means()
    compat.skip_empty_callback_hooks()
    compat.lean_module_hooks()
    compat.cache_training_step_signature()
    compat.cache_data_hook_instances()
    precision = resolve_precision(
        cfg.trainer.get("precision"), cfg.trainer.get("accelerator", "cpu")
    )
    configure_matmul(precision)
    kwargs: dict[str, Any] = {
        "precision": precision,
        "plugins": [AtomicCheckpointIO()],
        "use_distributed_sampler": False,
    }
    kwargs.update(overrides)
    return instantiate(cfg.trainer, **kwargs)
