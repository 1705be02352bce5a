"""Which train+val sample validates in which fold: stratified by label, a function of the seed.

`<run dir>/folds.json` records the assignment; a resumed run or a fold run as a separate job
(`cv.fold=k`) reads the same assignment back and refuses one that disagrees with its config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.model_selection import KFold, StratifiedKFold

from trainwell.errors import TrainwellError
from trainwell.io.results import write_results
from trainwell.io.run_dir import new_run_override

FOLDS_FILE = "folds.json"


@dataclass(frozen=True)
class Folds:
    """`val[k]`: the sample indices (the datamodule's own, sorted) validating in fold k."""

    k: int
    seed: int
    stratified: bool
    val: tuple[tuple[int, ...], ...]

    def train_of(self, fold: int) -> np.ndarray:
        return np.sort(np.concatenate([v for j, v in enumerate(self.val) if j != fold]))

    def val_of(self, fold: int) -> np.ndarray:
        return np.asarray(self.val[fold], dtype=np.int64)

    def as_dict(self) -> dict:
        return {
            "k": self.k,
            "seed": self.seed,
            "stratified": self.stratified,
            "folds": [list(v) for v in self.val],
        }


def strata(labels: np.ndarray | None) -> np.ndarray | None:
    """What the folds are stratified by: class ids (integers, booleans, strings), or whatever
    groups a datamodule's cv_samples() gives in their place (a regression's binned targets).
    Float labels are values, not classes: plain shuffled folds (stratifying by every distinct
    value would refuse the data or split nothing meaningful)."""
    if labels is None:
        return None
    labels = np.asarray(labels)
    if labels.ndim != 1 or np.issubdtype(labels.dtype, np.floating):
        return None
    return labels


def assign_folds(indices: np.ndarray, labels: np.ndarray | None, k: int, seed: int) -> Folds:
    """K folds over `indices`; with class labels each fold's class counts are within one sample
    of the whole's proportions (a plain shuffled K-fold can leave a rare class out of a fold)."""
    indices = np.asarray(indices, dtype=np.int64)
    if k < 2 or k > len(indices):
        raise TrainwellError(f"cv.folds={k}: choose from 2 to the {len(indices)} train+val samples")
    labels = strata(labels)
    if labels is not None:
        counts = np.unique(labels, return_counts=True)[1]
        if counts.min() < k:
            raise TrainwellError(
                f"cv.folds={k}: a class has only {counts.min()} train+val samples, fewer than the "
                "folds, so some validation fold would miss it; lower cv.folds"
            )
        splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
        parts = splitter.split(indices, labels)
    else:
        parts = KFold(n_splits=k, shuffle=True, random_state=seed).split(indices)
    val = tuple(tuple(int(i) for i in np.sort(indices[v])) for _, v in parts)
    return Folds(k=k, seed=seed, stratified=labels is not None, val=val)


def write_folds(run_dir: Path, folds: Folds) -> None:
    """folds.json; an existing one must hold the same assignment (a resumed run, or the other
    fold jobs of the same cross-validation)."""
    path = run_dir / FOLDS_FILE
    if path.is_file():
        if read_folds(path) != folds:
            raise TrainwellError(
                f"{path} holds another fold assignment (cv.folds, seed or data changed); "
                "continue with the config that wrote it, or start a new run with "
                f"{new_run_override()}"
            )
        return
    write_results(path, folds.as_dict())


def read_folds(path: Path) -> Folds:
    raw = json.loads(path.read_text())
    return Folds(
        k=int(raw["k"]),
        seed=int(raw["seed"]),
        stratified=bool(raw["stratified"]),
        val=tuple(tuple(int(i) for i in v) for v in raw["folds"]),
    )
