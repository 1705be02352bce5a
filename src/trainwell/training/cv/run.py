"""`cv.folds=K`: K full runs, one per fold, then the out-of-fold file and results.json's `cv`.

Each fold is `training.run.train` on the fold's config (its run dir is `<run dir>/fold_<k>`), so
it has every guarantee a single run has: exact accumulation, exact resume, any world size. With
`resume=auto` a finished fold returns its results without training and the interrupted one
continues from its newest checkpoint. The test split is not used: the folds choose and score,
the test split stays for the model finally chosen (eval.py).
"""

from __future__ import annotations

import copy
from operator import methodcaller
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from trainwell.callbacks.pruning import trial_pruning
from trainwell.errors import TrainwellError
from trainwell.io.announce import announce
from trainwell.io.results import started_now, with_doctor_report, write_results
from trainwell.io.writer import writes_shared_files
from trainwell.summary.build import cv_summary
from trainwell.summary.write import write_summary
from trainwell.training.cv.collect import UNTESTED
from trainwell.training.cv.data_hook import refuse_leaks, require_hook, samples
from trainwell.training.cv.folds import Folds, assign_folds, write_folds
from trainwell.training.cv.oof import (
    assemble,
    cv_line,
    cv_metrics,
    cv_weights,
    fold_figures,
    write_fold_predictions,
)
from trainwell.training.run import train


def fold_dir(run_dir: Path, fold: int) -> Path:
    return run_dir / f"fold_{fold}"


def fold_config(cfg: DictConfig, run_dir: Path, fold: int) -> DictConfig:
    """The run's config with the fold's run dir: every `${paths.output_dir}` (checkpoints,
    logs) follows it. No test stage; the config was printed once for the whole run; a search
    trial's pruner sees the mean over folds (cross_validate reports it), not each fold's epochs."""
    out = copy.deepcopy(cfg)
    with open_dict(out):
        out.paths.output_dir = str(fold_dir(run_dir, fold))
        out.test = False
        out.print_config = False
        out.pruning = None
    return out


def plan_folds(cfg: DictConfig) -> Folds:
    """The fold assignment, from the datamodule's hook and the run seed."""
    k = int(cfg.cv.folds)
    datamodule = instantiate(cfg.data)
    require_hook(datamodule, k)
    indices, labels = samples(datamodule)
    return assign_folds(indices, labels, k, int(cfg.seed))


def _chosen_folds(cfg: DictConfig, k: int) -> list[int]:
    only = OmegaConf.select(cfg, "cv.fold")
    if only is None:
        return list(range(k))
    if isinstance(only, str) and only.isdigit():
        only = int(only)  # cv.fold='${oc.env:SLURM_ARRAY_TASK_ID}' resolves to a string
    if isinstance(only, bool) or not isinstance(only, int) or not 0 <= only < k:
        raise TrainwellError(f"cv.fold={only}: choose a fold from 0 to {k - 1} (cv.folds={k})")
    return [only]


def _per_fold_name(metric: str) -> str:
    """cv/<name>_mean -> <name>: the per-fold figure whose running mean a pruner sees."""
    if not (metric.startswith("cv/") and metric.endswith("_mean")):
        raise TrainwellError(
            f"optimized_metric={metric}: a pruned search over folds optimizes a CV mean, "
            "cv/<metric>_mean (e.g. cv/acc_mean)"
        )
    return metric[len("cv/") : -len("_mean")]


def cross_validate(cfg: DictConfig, doctor_report: str | None = None) -> dict[str, Any]:
    run_dir = Path(cfg.paths.output_dir)
    started_at = started_now()
    announce(f"run dir: {run_dir}")
    folds = plan_folds(cfg)
    chosen = _chosen_folds(cfg, folds.k)
    refuse_leaks(cfg.data, folds.train_of(chosen[0]), folds.val_of(chosen[0]))
    # Under DDP every rank runs the fold loop (each fold is a full multi-rank run); one writes.
    if writes_shared_files():
        run_dir.mkdir(parents=True, exist_ok=True)
        write_folds(run_dir, folds)
    best, last, weights = {}, {}, {}
    pruning, so_far = trial_pruning(cfg, run_dir), []
    if pruning is not None:
        _per_fold_name(pruning.metric)  # refused before any fold trains
    for fold in chosen:
        announce(f"cv: fold {fold} of {folds.k} ({len(folds.val[fold])} validation samples)")
        fold_cfg = fold_config(cfg, run_dir, fold)
        # each fold is one plain run on the fold's samples
        on_fold = methodcaller("set_cv_fold", folds.train_of(fold), folds.val_of(fold))
        done = train(fold_cfg, prepare_data=on_fold)
        best[f"fold_{fold}"], last[f"fold_{fold}"] = done["best_ckpt"], done["last_ckpt"]
        weights[f"fold_{fold}"] = done.get("weights")
        if writes_shared_files():
            if not done["best_ckpt"]:
                raise TrainwellError(
                    f"cv: fold {fold} wrote no best checkpoint to predict its validation "
                    "samples with (fast_dev_run, or callbacks.model_checkpoint=null)"
                )
            write_fold_predictions(fold_cfg, folds, fold, done["best_ckpt"])
        if pruning is not None:  # a search trial: the pruner sees the CV mean so far
            figures = fold_figures(fold_dir(run_dir, fold), fold, folds)[2]
            so_far.append(float(figures[_per_fold_name(pruning.metric)]))
            pruning.report(len(so_far) - 1, sum(so_far) / len(so_far))
    results: dict[str, Any] = {
        "test": UNTESTED,
        "best_ckpt": best,
        "last_ckpt": last,
        "weights": cv_weights(weights),
        "started_at": started_at,
    }
    results = with_doctor_report(results, doctor_report)
    if not writes_shared_files():
        return results  # ranks > 0: rank 0 writes the files and the figures
    if len(chosen) == folds.k:
        cv = assemble(run_dir, {f: fold_dir(run_dir, f) for f in chosen}, folds)
        results |= {"cv": cv, "metrics": cv_metrics(cv)}
    else:  # one fold of a split run: scripts/cv_assemble.py joins the folds' run dirs
        results |= {"cv": {"folds": folds.k, "fold": chosen[0]}, "metrics": {}}
    write_results(run_dir / "results.json", results)
    if len(chosen) == folds.k:
        write_summary(run_dir, cv_summary(results["cv"]))
        announce(cv_line(results["cv"]))
    announce(f"run dir: {run_dir}")
    return results
