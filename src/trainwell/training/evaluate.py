"""Test metrics for a checkpoint: the model in eval() under inference_mode, loaded without pickles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities.model_helpers import is_overridden
from omegaconf import DictConfig

from trainwell import compat
from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_read import load_checkpoint_file
from trainwell.io.named_paths import eval_checkpoint
from trainwell.io.results import write_results
from trainwell.loading.sharding import install_loader_policy
from trainwell.training.builders import build_trainer


def cannot_test(module: L.LightningModule, datamodule: Any) -> str | None:
    """Why `Trainer.test` cannot run on these (None: it can). Lightning would raise after fit."""
    if not is_overridden("test_step", module):
        return f"{type(module).__name__} defines no test_step"
    if isinstance(datamodule, L.LightningDataModule) and not is_overridden(
        "test_dataloader", datamodule
    ):
        return f"{type(datamodule).__name__} defines no test_dataloader"
    return None


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    ckpt = eval_checkpoint(cfg)
    run_dir = Path(cfg.paths.output_dir)
    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data)
    # Every test sample counts once on any number of ranks (no DistributedSampler padding).
    install_loader_policy(datamodule, seed=int(cfg.seed))
    task = instantiate(cfg.model)
    untestable = cannot_test(task, datamodule)
    if untestable:
        raise TrainwellError(
            f"eval.py cannot test {ckpt}: {untestable} (eval.py runs the module's test_step "
            "over the datamodule's test_dataloader); add them to evaluate this checkpoint"
        )
    # Announced once nothing can refuse the command: a refused run dir is removed again.
    print(f"run dir: {run_dir}", flush=True)
    trainer = build_trainer(cfg, logger=False, callbacks=[], enable_checkpointing=False)
    # Trainer.test puts the task in eval() and runs under torch.inference_mode; weights_only=True
    # refuses checkpoints that would execute pickled code on load.
    # The checkpoint holds the training callbacks' state, which testing does not need.
    with compat.callbacks_left_out_on_purpose():
        tested = trainer.test(task, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)
    # What was tested is the checkpoint's state_dict: an EMA run's holds the average (the trained
    # weights while the average had no update yet).
    written = load_checkpoint_file(ckpt, mmap=True)
    averaged = "ema" if compat.holds_updated_average(written) else "trained"
    results = {
        "metrics": {k: float(v) for k, v in tested[0].items()},
        "ckpt": str(Path(ckpt).resolve()),
        "weights": {"test": averaged},
    }
    if trainer.is_global_zero:
        write_results(run_dir / "results.json", results)
    print(f"run dir: {run_dir}", flush=True)
    return results
