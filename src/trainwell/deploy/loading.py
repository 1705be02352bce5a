"""One rebuild path from a checkpoint to the trained module and its data, for predict and export.

The run's own config builds the model and the datamodule (never today's defaults), the weights
come from a weights-only load, and whatever the datamodule fitted on the training split (a
mean and std) comes from the checkpoint: Lightning writes `datamodule.state_dict()` into every
checkpoint under the datamodule's class name (when it is not empty). A checkpoint without it is
refused in one line, the statistics are never fitted again; a datamodule without state needs none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, open_dict

from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_read import load_checkpoint_file
from trainwell.io.moved_targets import load_saved_config


@dataclass
class TrainedRun:
    cfg: DictConfig
    module: L.LightningModule
    datamodule: Any
    checkpoint_path: Path


def run_dir_of(ckpt_path: str | Path) -> Path:
    """<run dir> of <run dir>/checkpoints/<name>.ckpt."""
    return Path(ckpt_path).resolve().parent.parent


def saved_config(ckpt_path: str | Path) -> DictConfig:
    """The config the run that wrote `ckpt_path` saved in <run dir>/.hydra/config.yaml, its class
    paths as this release spells them."""
    run_dir = run_dir_of(ckpt_path)
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        raise TrainwellError(
            f"{path} not found: {ckpt_path} is not inside a run dir written by scripts/train.py "
            "(<run dir>/checkpoints/<name>.ckpt)"
        )
    cfg = load_saved_config(path)
    with open_dict(cfg):
        cfg.paths.output_dir = str(run_dir)
    return cfg


def _load_datamodule_state(checkpoint: dict[str, Any], datamodule: Any) -> bool:
    """The datamodule's state from the checkpoint, where Lightning wrote one; True if it did."""
    state = checkpoint.get(type(datamodule).__qualname__)
    if state:
        datamodule.load_state_dict(state)
    return bool(state)


def _refuse_missing_state(datamodule: Any, path: Path) -> None:
    """After setup: a datamodule with state (statistics fitted on the training split) whose
    checkpoint carries none would now use values fitted again. Lightning writes a datamodule's
    state only when `state_dict()` is not empty, so a datamodule without state (its state_dict()
    empty after setup too, as in lightning-hydra-template's MNISTDataModule) is fine."""
    if datamodule.state_dict():
        key = type(datamodule).__qualname__
        raise TrainwellError(
            f"{path} holds no datamodule statistics ('{key}' missing: written before they "
            "travelled with checkpoints); retrain to get a checkpoint predict/export can use"
        )


def load_run(ckpt_path: str | Path, cfg: DictConfig | None = None) -> TrainedRun:
    """The trained module (eval mode, CPU) and its datamodule, set up with the checkpoint's
    statistics. `cfg`: the run's composed config (scripts pass theirs); default: the saved one."""
    path = Path(ckpt_path)
    checkpoint = load_checkpoint_file(path)
    cfg = saved_config(path) if cfg is None else cfg
    datamodule = instantiate(cfg.data)
    carried = _load_datamodule_state(checkpoint, datamodule)
    module = instantiate(cfg.model)
    module.load_state_dict(checkpoint["state_dict"])
    module.eval()
    datamodule.setup("test")
    if not carried:
        _refuse_missing_state(datamodule, path)
    return TrainedRun(cfg=cfg, module=module, datamodule=datamodule, checkpoint_path=path)


def load_trained(ckpt_path: str | Path) -> L.LightningModule:
    """The LightningModule `ckpt_path` holds, rebuilt from its run's config, in eval mode."""
    return load_run(ckpt_path).module
