"""Real Lightning Trainers for tests that probe the loop itself, in-process."""

from __future__ import annotations

import lightning as L

QUIET = {
    "accelerator": "cpu",
    "devices": 1,
    "limit_val_batches": 0,
    "num_sanity_val_steps": 0,
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def quiet_trainer(**kwargs) -> L.Trainer:
    """A real Lightning Trainer without the run's side outputs (no logger, checkpoints, progress
    bar, summary; no validation unless asked): for tests that probe the loop itself."""
    return L.Trainer(**{**QUIET, **kwargs})


def template_trainer(**kwargs) -> L.Trainer:
    """quiet_trainer with the parts of the template every run has: exact accumulation first and
    the template's own sharding (no DistributedSampler). Pair it with `templated(datamodule)`."""
    from trainwell.callbacks.accumulation import ExactAccumulation

    callbacks = [ExactAccumulation(), *kwargs.pop("callbacks", [])]
    return quiet_trainer(use_distributed_sampler=False, callbacks=callbacks, **kwargs)


def templated(datamodule: L.LightningDataModule, seed: int = 0) -> L.LightningDataModule:
    """The datamodule with the template's loader policy (sharding, order, resumable train)."""
    from trainwell.loading.sharding import install_loader_policy

    install_loader_policy(datamodule, seed=seed)
    return datamodule
