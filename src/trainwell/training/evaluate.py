"""Test metrics for a checkpoint: the model in eval() under inference_mode, loaded without pickles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig

from trainwell.data.sharding import install_loader_policy
from trainwell.errors import TrainwellError
from trainwell.training.builders import build_trainer
from trainwell.training.results import write_results


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    ckpt = cfg.get("ckpt_path")
    if not ckpt:
        raise TrainwellError(
            "eval.py needs a checkpoint: pass ckpt_path=<run dir>/checkpoints/best.ckpt"
        )
    if not Path(ckpt).is_file():
        raise TrainwellError(
            f"checkpoint not found: {ckpt}; pass ckpt_path=<path to an existing .ckpt>"
        )
    run_dir = Path(cfg.paths.output_dir)
    print(f"run dir: {run_dir}", flush=True)
    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data)
    # Every test sample counts once on any number of ranks (no DistributedSampler padding).
    install_loader_policy(datamodule, seed=int(cfg.seed))
    task = instantiate(cfg.model)
    trainer = build_trainer(cfg, logger=False, callbacks=[], enable_checkpointing=False)
    # Trainer.test puts the task in eval() and runs under torch.inference_mode; weights_only=True
    # refuses checkpoints that would execute pickled code on load.
    tested = trainer.test(task, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)
    results = {
        "metrics": {k: float(v) for k, v in tested[0].items()},
        "ckpt": str(Path(ckpt).resolve()),
    }
    if trainer.is_global_zero:
        write_results(run_dir / "results.json", results)
    print(f"run dir: {run_dir}", flush=True)
    return results
