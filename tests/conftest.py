"""Shared test fixtures: compose the real config tree, run the real scripts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import lightning as L
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

import trainwell.resolvers  # noqa: F401  (the config tree uses trainwell's resolvers)

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def compose_config(
    overrides: list[str] | None = None, run_dir: Path | None = None, config_name: str = "train"
) -> DictConfig:
    """The config train.py would see for these overrides, with the run dir pinned to `run_dir`."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=list(overrides or []))
    with open_dict(cfg):
        cfg.paths.root_dir = str(REPO)
        cfg.paths.output_dir = str(run_dir or REPO / "logs" / "pytest")
    return cfg


def run_script(
    script: str, *overrides: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run scripts/<script> as a user would, in a subprocess, capturing output."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true", **(env or {})}
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), *overrides],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def cfg_factory(tmp_path: Path) -> Callable[..., DictConfig]:
    def make(overrides: list[str] | None = None, config_name: str = "train") -> DictConfig:
        return compose_config(overrides, tmp_path / "run", config_name)

    return make


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of the default experiment (`python scripts/train.py`), shared by the tests that
    read its outputs (results, checkpoints, eval, notebook). Returns the run dir."""
    run_dir = tmp_path_factory.mktemp("digits") / "run"
    proc = run_script("train.py", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


# A smooth, normalisation-free net and SGD without momentum, weight decay or schedule, in fp32:
# one step's update is lr x gradient, so equal gradients give equal weights (conf/model/mlp.yaml
# says why not a ReLU ResNet). For exact-equality checks across accumulation and world sizes.
SMOOTH_SGD_MLP = (
    "model=mlp",
    "model.optimizer.momentum=0.0",
    "model.optimizer.nesterov=false",
    "model.optimizer.weight_decay=0.0",
    "model.scheduler=null",
    "data=synthetic",
    "trainer.num_sanity_val_steps=0",
    "trainer.deterministic=true",
)

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
    from trainwell.data.sharding import install_loader_policy

    install_loader_policy(datamodule, seed=seed)
    return datamodule


def run_ok(script: str, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    """Run scripts/<script> into `run_dir` and require success (stderr tail shown otherwise)."""
    proc = run_script(script, *overrides, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc
