"""Joining folds trained as separate jobs (`-m cv.fold=0,1,...`, SLURM array tasks): the same
`oof_predictions.csv` and results.json `cv` as one run training every fold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainwell.errors import TrainwellError
from trainwell.io.results import write_results
from trainwell.summary.build import cv_summary
from trainwell.summary.write import write_summary
from trainwell.training.cv.folds import FOLDS_FILE, Folds, read_folds, write_folds
from trainwell.training.cv.oof import OOF_FILE, assemble, cv_metrics, cv_weights

UNTESTED = "skipped: a cross-validation run leaves the test split untouched"


def _job_dirs(root: Path) -> list[Path]:
    """`root` itself if it is a cross-validation run dir, else its subdirs that are."""
    if (root / FOLDS_FILE).is_file():
        return [root]
    return sorted(p.parent for p in root.glob(f"*/{FOLDS_FILE}"))


def collect(root: Path) -> dict[str, Any]:
    """Find every finished fold under `root` (a sweep dir of fold jobs, or one run dir), check
    they belong to one assignment, and write folds.json, oof_predictions.csv, results.json and
    the folds' summary (summary.json, .md, .png) into `root`."""
    jobs = _job_dirs(root)
    if not jobs:
        raise TrainwellError(f"cv: no {FOLDS_FILE} in {root} or its subdirs: not a CV run's dir")
    folds: Folds | None = None
    found: dict[int, Path] = {}
    for job in jobs:
        mine = read_folds(job / FOLDS_FILE)
        if folds is not None and mine != folds:
            raise TrainwellError(
                f"cv: {job / FOLDS_FILE} holds another fold assignment than {jobs[0] / FOLDS_FILE} "
                "(cv.folds, seed or data differ); join only the folds of one cross-validation"
            )
        folds = mine
        for fold in range(mine.k):
            path = job / f"fold_{fold}"
            if not (path / OOF_FILE).is_file() or not (path / "results.json").is_file():
                continue
            if fold in found and found[fold] != path:
                raise TrainwellError(f"cv: fold {fold} finished twice ({found[fold]} and {path})")
            found[fold] = path
    assert folds is not None
    cv = assemble(root, found, folds)
    weights = {
        f"fold_{k}": json.loads((found[k] / "results.json").read_text()).get("weights")
        for k in sorted(found)
    }
    write_folds(root, folds)
    results = {
        "cv": cv,
        "metrics": cv_metrics(cv),
        "test": UNTESTED,
        "weights": cv_weights(weights),
        "best_ckpt": {f"fold_{k}": str(found[k] / "checkpoints" / "best.ckpt") for k in found},
        "last_ckpt": {f"fold_{k}": str(found[k] / "checkpoints" / "last.ckpt") for k in found},
    }
    write_results(root / "results.json", results)
    write_summary(root, cv_summary(cv))
    return results
