"""The datamodule's side of cross-validation: one hook, and a probe that it fits nothing on
validation samples.

A datamodule takes part in `cv.folds=K` by defining both methods of the hook:

    def cv_samples(self) -> tuple[np.ndarray, np.ndarray | None]:
        '''(indices, labels) of every train+val sample: the test split is not among them.
        Class labels (one integer or string per index; or any groups to stratify by, such
        as binned regression targets) make the folds stratified; None, or float values,
        give plain shuffled folds.'''

    def set_cv_fold(self, train: np.ndarray, val: np.ndarray) -> None:
        '''Called before setup(): train on the samples `train`, validate on `val` (indices from
        cv_samples, sorted; val_dataloader yields them in that order, unshuffled). Everything
        the datamodule fits (normalisation statistics, vocabularies) is fitted on `train` only
        and returned by state_dict(), so it travels in the fold's checkpoints.'''
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from trainwell.errors import TrainwellError

HOOK = ("cv_samples", "set_cv_fold")


def require_hook(datamodule: Any, folds: int) -> None:
    """One line naming the missing method, before anything is written."""
    for name in HOOK:
        if not callable(getattr(datamodule, name, None)):
            raise TrainwellError(
                f"data: {type(datamodule).__name__} has no {name}(): cross-validation "
                f"(cv.folds={folds}) needs the datamodule hook cv_samples() + "
                "set_cv_fold(train, val) (docs/running.md: Cross-validation)"
            )


def samples(datamodule: Any) -> tuple[np.ndarray, np.ndarray | None]:
    indices, labels = datamodule.cv_samples()
    indices = np.asarray(indices, dtype=np.int64)
    if labels is not None and len(labels) != len(indices):
        raise TrainwellError(
            f"data: {type(datamodule).__name__}.cv_samples() gives {len(indices)} indices and "
            f"{len(labels)} labels; give one label per index (or None)"
        )
    if len(np.unique(indices)) != len(indices):
        raise TrainwellError(
            f"data: {type(datamodule).__name__}.cv_samples() repeats indices; each train+val "
            "sample must appear once"
        )
    return indices, None if labels is None else np.asarray(labels)


def _fitted_state(data_cfg: DictConfig, train: np.ndarray, val: np.ndarray) -> dict[str, Any]:
    datamodule = instantiate(data_cfg)
    datamodule.set_cv_fold(train, val)
    datamodule.setup("fit")
    return datamodule.state_dict()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return bool(a == b)


def refuse_leaks(data_cfg: DictConfig, train: np.ndarray, val: np.ndarray) -> None:
    """What the datamodule fits (its state_dict) must follow the fold's training part and only
    it: the same when only the validation part changes, different when the training part does.
    A state fitted on all the data (or on train+val) leaks validation into training and makes
    every fold's score optimistic; the run refuses it before training."""
    state = _fitted_state(data_cfg, train, val)
    if not state:
        return  # nothing fitted: nothing to leak
    name = data_cfg.get("_target_", "the datamodule")
    if not _same(_fitted_state(data_cfg, train, val[: max(1, len(val) // 2)]), state):
        raise TrainwellError(
            f"data: {name} fits its state ({', '.join(state)}) on validation samples too: it "
            "changed when only the fold's validation part changed; fit it on set_cv_fold's "
            "train indices only"
        )
    if _same(_fitted_state(data_cfg, train[: len(train) // 2], val), state):
        raise TrainwellError(
            f"data: {name} fits its state ({', '.join(state)}) on samples outside the fold's "
            "training part (it did not change when the training part did: fitted on all the "
            "data?); fit it on set_cv_fold's train indices only"
        )
