"""One training run: config -> datamodule + task -> Trainer -> fit -> test best -> results.json."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn
from omegaconf import DictConfig, OmegaConf

from trainwell.data.base import ClassificationDataModule
from trainwell.tasks.schedules import warmup_steps_for
from trainwell.training.accumulation import batchnorm_warning
from trainwell.training.checkpointing import AtomicCheckpointIO, TrainingStateCallback
from trainwell.training.config_tree import print_config_tree
from trainwell.training.lr_scaling import scale_lr
from trainwell.training.plan import TrainingPlan, make_plan
from trainwell.training.precision import configure_matmul, resolve_precision
from trainwell.training.preemption import PreemptionCallback
from trainwell.training.redact import redact
from trainwell.training.results import write_results
from trainwell.training.resume import check_resume, resolve_ckpt_path


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
    # Every checkpoint read or written goes through AtomicCheckpointIO: atomic writes, and loads
    # with weights_only=True whatever a caller asks for.
    kwargs: dict[str, Any] = {"precision": precision, "plugins": [AtomicCheckpointIO()]}
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
        limit_batches=trainer.overfit_batches or trainer.limit_train_batches,
    )
    base_lr = cfg.model.optimizer.get("lr")
    if base_lr is not None:
        scaling = cfg.get("lr_scaling") or {}
        rule = scaling.get("rule", "none")
        reference = int(scaling.get("reference_batch", plan.effective_batch))
        lr = scale_lr(float(base_lr), rule, plan.effective_batch, reference)
        plan = replace(plan, lr_rule=rule, reference_batch=reference, base_lr=base_lr, lr=lr)
    scheduler = cfg.model.get("scheduler")
    if scheduler is None:
        return plan
    warmup = warmup_steps_for(
        plan.total_optimizer_steps,
        scheduler.get("warmup_fraction", 0.0),
        scheduler.get("warmup_steps"),
    )
    return replace(plan, warmup_steps=warmup)


def _resolved(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


@rank_zero_only
def _announce(text: str) -> None:
    print(text, flush=True)


def _preflight(cfg: DictConfig) -> str:
    """doctor=true: the doctor's probes before any compute is spent; raises on a `fail`.

    Only the launching process runs it: DDP re-executes this script per rank (LOCAL_RANK set).
    """
    if not cfg.get("doctor", False) or os.environ.get("LOCAL_RANK", "0") != "0":
        return ""
    from trainwell.doctor.run import preflight  # the doctor imports this module

    return str(preflight(cfg))


def train(cfg: DictConfig) -> dict[str, Any]:
    run_dir = Path(cfg.paths.output_dir)
    _announce(f"run dir: {run_dir}")
    if cfg.get("print_config", True):
        # Secrets resolved from the environment never reach stdout (a SLURM .out file).
        rank_zero_only(print_config_tree)(OmegaConf.create(redact(_resolved(cfg))))
    doctor_report = _preflight(cfg)
    L.seed_everything(cfg.seed, workers=True)

    datamodule: ClassificationDataModule = instantiate(cfg.data)
    task: L.LightningModule = instantiate(cfg.model)
    loggers = build_loggers(cfg)
    # Exact resume and pre-emption are guarantees, not options: always installed.
    always = [TrainingStateCallback(), PreemptionCallback(run_dir / "checkpoints")]
    trainer = build_trainer(cfg, callbacks=build_callbacks(cfg) + always, logger=loggers or False)

    plan = build_plan(cfg, datamodule, trainer)
    _announce("training plan:\n  " + "\n  ".join(plan.lines()))
    # The optimizer and scheduler follow the plan: scaled LR, total steps = optimizer steps.
    task.use_plan(total_steps=plan.total_optimizer_steps, lr=plan.lr)
    sync_bn = bool(cfg.trainer.get("sync_batchnorm", False))
    bn_warning = batchnorm_warning(
        task.net, plan.micro_batch, plan.accumulate, plan.world_size, sync_bn
    )
    if bn_warning:
        rank_zero_warn(bn_warning)
    ckpt_path = resolve_ckpt_path(cfg, run_dir)
    if ckpt_path:
        batch = {
            "micro_batch": plan.micro_batch,
            "accumulate": plan.accumulate,
            "world_size": plan.world_size,
            "effective_batch": plan.effective_batch,
        }
        allow = bool(cfg.get("resume_allow_batch_change", False))
        check_resume(ckpt_path, task, batch, allow)
    for logger in loggers:
        logger.log_hyperparams(redact(_resolved(cfg)))

    trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
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
    if doctor_report:
        results["doctor_report"] = doctor_report
    if trainer.is_global_zero:
        write_results(run_dir / "results.json", results)
    _announce(f"run dir: {run_dir}")
    return results
