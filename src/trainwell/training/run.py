"""One training run: config -> datamodule + task -> Trainer -> fit -> test best -> results.json."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from trainwell.data.base import ClassificationDataModule
from trainwell.tasks.schedules import warmup_steps_for
from trainwell.training.config_tree import print_config_tree
from trainwell.training.plan import TrainingPlan, make_plan
from trainwell.training.precision import configure_matmul, resolve_precision
from trainwell.training.results import write_results


def build_callbacks(cfg: DictConfig) -> list[L.Callback]:
    return [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]


def build_loggers(cfg: DictConfig) -> list[Any]:
    return [instantiate(c) for c in (cfg.get("logger") or {}).values() if c is not None]


def build_trainer(cfg: DictConfig, **overrides: Any) -> L.Trainer:
    """The configured Trainer with our precision resolution applied to `trainer.precision`."""
    precision = resolve_precision(
        cfg.trainer.get("precision"), cfg.trainer.get("accelerator", "cpu")
    )
    configure_matmul(precision)
    kwargs: dict[str, Any] = {"precision": precision}
    kwargs.update(overrides)
    return instantiate(cfg.trainer, **kwargs)


def build_plan(
    cfg: DictConfig, datamodule: ClassificationDataModule, trainer: L.Trainer
) -> TrainingPlan:
    plan = make_plan(
        dataset_size=datamodule.train_size(),
        micro_batch=datamodule.batch_size,
        accumulate=trainer.accumulate_grad_batches,
        world_size=trainer.world_size,
        max_epochs=trainer.max_epochs,
        max_steps=trainer.max_steps,
        drop_last=datamodule.drop_last,
    )
    scheduler = cfg.model.get("scheduler")
    if scheduler is None:
        return plan
    warmup = warmup_steps_for(
        plan.total_optimizer_steps,
        scheduler.get("warmup_fraction", 0.0),
        scheduler.get("warmup_steps"),
    )
    return replace(plan, warmup_steps=warmup)


@rank_zero_only
def _announce(text: str) -> None:
    print(text, flush=True)


def train(cfg: DictConfig) -> dict[str, Any]:
    run_dir = Path(cfg.paths.output_dir)
    _announce(f"run dir: {run_dir}")
    if cfg.get("print_config", True):
        rank_zero_only(print_config_tree)(cfg)
    L.seed_everything(cfg.seed, workers=True)

    datamodule: ClassificationDataModule = instantiate(cfg.data)
    task: L.LightningModule = instantiate(cfg.model)
    loggers = build_loggers(cfg)
    trainer = build_trainer(cfg, callbacks=build_callbacks(cfg), logger=loggers or False)

    plan = build_plan(cfg, datamodule, trainer)
    _announce("training plan:\n  " + "\n  ".join(plan.lines()))
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))

    trainer.fit(task, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    fit_metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}

    checkpoint = trainer.checkpoint_callback
    best = checkpoint.best_model_path if checkpoint is not None else ""
    last = str(Path(checkpoint.dirpath) / "last.ckpt") if checkpoint is not None else ""
    test_metrics: dict[str, float] = {}
    if cfg.get("test", True):
        # Test the best checkpoint, not the last weights; fast_dev_run writes none, so it tests
        # the weights in memory and results.json says so (best_ckpt is empty).
        tested = trainer.test(
            task, datamodule=datamodule, ckpt_path=best or None, weights_only=True
        )
        test_metrics = {k: float(v) for k, v in (tested[0] if tested else {}).items()}

    results = {
        "metrics": {**fit_metrics, **test_metrics},
        "best_ckpt": best,
        "last_ckpt": last if last and Path(last).exists() else "",
        "plan": plan.as_dict(),
    }
    if trainer.is_global_zero:
        write_results(run_dir / "results.json", results)
    _announce(f"run dir: {run_dir}")
    return results
