"""One training run: config -> datamodule + module -> Trainer -> fit -> test best -> results.json.

Any LightningModule / LightningDataModule reachable by `_target_` works: the template's
guarantees are callbacks and loader policies installed around them, never base classes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from trainwell.callbacks.ema import refuse_resume_without_ema, weights_used
from trainwell.callbacks.last_checkpoint import LastCheckpoint
from trainwell.callbacks.pruning import OptunaPruning, trial_pruning
from trainwell.callbacks.training_state import ExactResume
from trainwell.callbacks.validation_history import ValidationHistory, best_validation
from trainwell.io.announce import announce
from trainwell.io.checkpoint_read import load_checkpoint_file
from trainwell.io.checkpoint_write import AtomicCheckpointIO
from trainwell.io.config_tree import print_config_tree
from trainwell.io.redact import redact
from trainwell.io.results import started_now, with_doctor_report, write_results
from trainwell.io.run_dir import prepare_run_dir
from trainwell.loading.sharding import install_loader_policy
from trainwell.training.builders import (
    build_loggers,
    build_trainer,
    template_callbacks,
)
from trainwell.training.class_recall import zero_recall_line
from trainwell.training.evaluate import cannot_test
from trainwell.training.plan_callback import (
    NORM_KEY,
    TrainingPlanner,
    planned_factories,
    planner_settings,
)
from trainwell.training.resume import (
    check_architecture,
    read_resumed_checkpoint,
    resolve_ckpt_path,
)
from trainwell.training.stop_reason import early_stop_line, stop_reason


def _resolved(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _plan_callback(cfg: DictConfig, ckpt_path: str | None) -> TrainingPlanner:
    return TrainingPlanner(
        **planner_settings(cfg),
        sync_batchnorm=bool(cfg.trainer.get("sync_batchnorm", False)),
        allow_batch_change=bool(cfg.get("resume_allow_batch_change", False)),
        ckpt_path=ckpt_path,
        norm_switch=OmegaConf.select(cfg, NORM_KEY) is not None,
    )


def completed_results(
    run_dir: Path, ckpt_path: str | None, trainer_cfg: DictConfig
) -> dict[str, Any] | None:
    """A finished run relaunched with resume=auto: its results, if its newest checkpoint is the
    state those results were written from and the run's length is unchanged (nothing to train)."""
    path = run_dir / "results.json"
    if ckpt_path is None or not path.is_file():
        return None
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    finished = results.get("finished_at") or {}
    checkpoint = load_checkpoint_file(ckpt_path)
    if finished.get("global_step") != checkpoint.get("global_step"):
        return None
    planned = results.get("plan") or {}
    for key in ("max_epochs", "max_steps"):
        if planned.get(key) != trainer_cfg.get(key):
            return None  # a longer run was asked for: continue training
    return results


def train(
    cfg: DictConfig,
    doctor_report: str | None = None,
    prepare_data: Callable[[L.LightningDataModule], Any] | None = None,
) -> dict[str, Any]:
    """One training run, in its stages:

    1. the run dir: announced, the config printed (secrets redacted), the checkpoint to resume
       from resolved (`ckpt_path`, `resume=auto`), the dir checked; a finished run relaunched
       with resume=auto returns its results without training;
    2. the parts: seed, datamodule (+ the loader policy), the plan, the module (+ an
       architecture check against the resumed checkpoint), loggers, `template_callbacks`, the
       Trainer;
    3. fit;
    4. test of the best checkpoint (skipped with `test=false` or a module without a test split);
    5. results.json.

    `prepare_data`: called with the datamodule before anything is built from it (a caller that
    runs this as one of several runs, such as cross-validation's folds, chooses its data there).
    """
    run_dir = Path(cfg.paths.output_dir)
    started_at = started_now()  # this attempt's, not the first launch's
    ckpt_path = _open_run_dir(cfg, run_dir)
    done = (
        completed_results(run_dir, ckpt_path, cfg.trainer) if cfg.get("resume") == "auto" else None
    )
    if done is not None:
        announce(f"this run is complete (results.json matches {ckpt_path}); nothing to train")
        announce(f"run dir: {run_dir}")
        return done

    L.seed_everything(cfg.seed, workers=True)
    datamodule: L.LightningDataModule = instantiate(cfg.data)
    if prepare_data is not None:
        prepare_data(datamodule)
    install_loader_policy(datamodule, seed=int(cfg.seed))
    plan = _plan_callback(cfg, ckpt_path)
    module: L.LightningModule = instantiate(cfg.model, **planned_factories(cfg.model, plan))
    if ckpt_path:
        resumed = read_resumed_checkpoint(ckpt_path, cfg)
        check_architecture(resumed["state_dict"], module, ckpt_path)
        refuse_resume_without_ema(resumed, ckpt_path, cfg)
    loggers = build_loggers(cfg)
    callbacks = template_callbacks(cfg, run_dir, plan, has_logger=bool(loggers))
    pruning = trial_pruning(cfg, run_dir)
    if pruning is not None:  # a search trial
        callbacks.append(OptunaPruning(pruning))
    trainer = build_trainer(cfg, callbacks=callbacks, logger=loggers or False)
    _record_config(cfg, trainer, loggers)

    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    # Read before testing: trainer.test(ckpt_path=best) restores the callbacks' state as the
    # best checkpoint saved it, when early stopping had not yet stopped the run.
    why_stopped, stopped_early = stop_reason(trainer), early_stop_line(trainer)
    if stopped_early:
        announce(stopped_early)
    state = next(c for c in callbacks if isinstance(c, ExactResume))
    # A run resumed after its last training step logs nothing new: the metrics it had logged
    # come back from the checkpoint, and whatever the resumed run logged overrides them.
    fit_metrics = {
        **state.restored_callback_metrics,
        **{k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1},
    }
    history = next(c for c in callbacks if isinstance(c, ValidationHistory))
    fit_metrics, best_epoch, metrics_last = _best_epoch_metrics(fit_metrics, history, trainer)
    best, last = _checkpoint_paths(trainer)
    test_metrics, tested_what = _test_best(cfg, trainer, module, datamodule, best)
    if zero_recall_line(test_metrics):
        announce(zero_recall_line(test_metrics))

    results: dict[str, Any] = {
        "metrics": {**fit_metrics, **test_metrics},
        "best_epoch": best_epoch,
        "monitor": _monitor(cfg),
        "metrics_last": metrics_last,
        "best_ckpt": best,
        "last_ckpt": last,
        "test": tested_what,
        "weights": weights_used(callbacks, best, tested=not tested_what.startswith("skipped")),
        "plan": plan.plan.as_dict() if plan.plan is not None else {},
        "finished_at": {"global_step": trainer.global_step, "epoch": trainer.current_epoch},
        "stop_reason": why_stopped,
        "started_at": started_at,
    }
    results = with_doctor_report(results, doctor_report)
    if trainer.is_global_zero:
        write_results(run_dir / "results.json", results)
    announce(f"run dir: {run_dir}")
    return results


def _monitor(cfg: DictConfig) -> dict[str, Any]:
    """The metric that picks best.ckpt and its mode: what summaries and CV lead with."""
    return {
        "metric": OmegaConf.select(cfg, "monitor.metric"),
        "mode": OmegaConf.select(cfg, "monitor.mode"),
    }


def _best_epoch_metrics(
    fit_metrics: dict[str, float], history: ValidationHistory, trainer: L.Trainer
) -> tuple[dict[str, float], dict[str, int] | None, dict[str, float]]:
    """(results.json's fit metrics with the validation values of the best checkpoint's epoch,
    that epoch and step (None: no best checkpoint to point at), the last validation's values).
    Read before testing: the test stage restores the checkpoint callbacks' state."""
    best, last = best_validation(history, trainer)
    metrics_last = dict(last["metrics"]) if last is not None else {}
    if best is None:
        return fit_metrics, None, metrics_last
    where = {"epoch": int(best["epoch"]), "step": int(best["step"])}
    return {**fit_metrics, **best["metrics"]}, where, metrics_last


def _open_run_dir(cfg: DictConfig, run_dir: Path) -> str | None:
    """Stage 1: announce the run dir, print the config, resolve the checkpoint to resume from
    and check the dir against it. Returns that checkpoint (None: a fresh start)."""
    announce(f"run dir: {run_dir}")
    if cfg.get("print_config", True):
        # Secrets resolved from the environment never reach stdout (a SLURM .out file).
        rank_zero_only(print_config_tree)(OmegaConf.create(redact(_resolved(cfg))))
    ckpt_path = resolve_ckpt_path(cfg, run_dir)
    prepare_run_dir(run_dir, resuming=ckpt_path is not None)
    return ckpt_path


def _record_config(cfg: DictConfig, trainer: L.Trainer, loggers: list[Any]) -> None:
    """The run's config, redacted, to every logger; and to the checkpoint writer, which stores
    objects among the module's hparams as their config nodes."""
    if isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO):
        trainer.strategy.checkpoint_io.hparams_config = {
            "model": redact(_resolved(cfg.model)),
            "data": redact(_resolved(cfg.data)),
        }
    for logger in loggers:
        logger.log_hyperparams(redact(_resolved(cfg)))


def _test_best(
    cfg: DictConfig,
    trainer: L.Trainer,
    module: L.LightningModule,
    datamodule: L.LightningDataModule,
    best: str,
) -> tuple[dict[str, float], str]:
    """Stage 4: (test metrics, what was tested) for results.json."""
    untestable = cannot_test(module, datamodule)
    if not cfg.get("test", True):
        return {}, "skipped: test=false"
    if untestable:
        # A GAN or a demo module trains without a test split: Lightning would stop after fit.
        announce(f"testing skipped: {untestable}")
        return {}, f"skipped: {untestable}"
    # Test the best checkpoint, not the last weights; fast_dev_run writes none, so it tests
    # the weights in memory and results.json says so (best_ckpt is empty).
    tested = trainer.test(module, datamodule=datamodule, ckpt_path=best or None, weights_only=True)
    test_metrics = {k: float(v) for k, v in (tested[0] if tested else {}).items()}
    return test_metrics, "best_ckpt" if best else "final weights (no best_ckpt)"


def _checkpoint_paths(trainer: L.Trainer) -> tuple[str, str]:
    """(best checkpoint, last checkpoint) as written by this run's checkpoint callbacks."""
    best = last = ""
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, LastCheckpoint):
            path = Path(str(callback.dirpath)) / "last.ckpt"
            last = str(path) if path.exists() else ""
        elif getattr(callback, "monitor", None) not in (None, "step") and not best:
            best = str(callback.best_model_path or "")
    return best, last
