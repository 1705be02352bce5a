"""The one place a Trainer, its callbacks and its loggers are built (train, eval and the doctor)."""

from __future__ import annotations

from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.utilities import rank_zero_info
from omegaconf import DictConfig

from trainwell import compat
from trainwell.callbacks.accumulation import ExactAccumulation
from trainwell.callbacks.learning_rate import LearningRateLogger
from trainwell.training.background_writes import BackgroundCheckpointWrites
from trainwell.training.checkpoint_io import AtomicCheckpointIO
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


def build_trainer(cfg: DictConfig, **overrides: Any) -> L.Trainer:
    """The configured Trainer with the template's fixed parts.

    * exact accumulation first in the callback list (callbacks/accumulation.py): every other
      gradient hook then sees the final gradients;
    * `use_distributed_sampler=False`: the template shards loaders itself, without the padding
      Lightning's DistributedSampler adds (data/sharding.py);
    * every checkpoint read or written goes through AtomicCheckpointIO: atomic writes off the
      training thread during the training loop (flushed when it ends or fails), and loads with
      weights_only=True whatever a caller asks for;
    * `trainer.precision` resolved (auto, and no silent fp16 -> bf16 on CPU);
    * logged means synced across ranks without Lightning's integer flooring (compat);
    * a callback costs nothing in a hook it does not implement (compat).
    """
    compat.exact_logged_means()
    compat.skip_empty_callback_hooks()
    precision = resolve_precision(
        cfg.trainer.get("precision"), cfg.trainer.get("accelerator", "cpu")
    )
    configure_matmul(precision)
    callbacks = list(overrides.pop("callbacks", []))
    if not any(isinstance(c, ExactAccumulation) for c in callbacks):
        callbacks.insert(0, ExactAccumulation())
    callbacks.append(BackgroundCheckpointWrites())
    kwargs: dict[str, Any] = {
        "precision": precision,
        "plugins": [AtomicCheckpointIO()],
        "use_distributed_sampler": False,
        "callbacks": callbacks,
    }
    kwargs.update(overrides)
    return instantiate(cfg.trainer, **kwargs)
