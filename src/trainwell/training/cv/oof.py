"""Out-of-fold predictions and the `cv` summary of results.json.

Each fold writes `fold_<k>/oof_predictions.csv`: its validation samples, predicted by the fold's
best checkpoint (eval mode, inference mode, the fold's own fitted statistics). `assemble` joins
the folds' files into `<run dir>/oof_predictions.csv` (each train+val sample exactly once) and
computes the figures from the files alone, so a run in one process, a resumed run and folds run
as separate jobs give the same bytes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_read import load_checkpoint_file
from trainwell.io.results import write_text
from trainwell.loading.labels import probability_columns
from trainwell.summary.stats import describe
from trainwell.training.cv.folds import Folds

OOF_FILE = "oof_predictions.csv"


def _write_lines(path: Path, lines: list[str]) -> None:
    write_text(path, "\n".join(lines) + "\n")


def _class_names(datamodule: L.LightningDataModule) -> list[str] | None:
    """The names predict.py gives the classes: the datamodule's raw form's `classes`."""
    raw_form = getattr(datamodule, "raw_form", None)
    return raw_form().get("classes") if callable(raw_form) else None


def _fold_logits(
    cfg: DictConfig, folds: Folds, fold: int, ckpt_path: str
) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    """(logits, targets, class names) of the fold's validation samples, in their index
    order."""
    checkpoint = load_checkpoint_file(ckpt_path)
    datamodule = instantiate(cfg.data)
    datamodule.set_cv_fold(folds.train_of(fold), folds.val_of(fold))
    state = checkpoint.get(type(datamodule).__qualname__)
    if state:  # the statistics the fold trained with, never fitted again
        datamodule.load_state_dict(state)
    datamodule.setup("validate")
    module: L.LightningModule = instantiate(cfg.model)
    module.load_state_dict(checkpoint["state_dict"])
    module.eval()
    logits, targets = [], []
    with torch.inference_mode():
        for batch in datamodule.val_dataloader():
            if not isinstance(batch, list | tuple) or len(batch) != 2:
                raise TrainwellError(
                    "cv: out-of-fold predictions need (input, target) validation batches; "
                    f"{type(datamodule).__name__} yields {type(batch).__name__}"
                )
            logits.append(module(batch[0]).double())
            targets.append(batch[1])
    return torch.cat(logits).numpy(), torch.cat(targets).numpy(), _class_names(datamodule)


def write_fold_predictions(cfg: DictConfig, folds: Folds, fold: int, ckpt_path: str) -> Path:
    """fold_<k>/oof_predictions.csv: index, fold, prediction, p_<class>..., target; the
    probability columns named as predict.py names them."""
    logits, targets, classes = _fold_logits(cfg, folds, fold, ckpt_path)
    index = folds.val_of(fold)
    if len(index) != len(logits):
        raise TrainwellError(
            f"cv: fold {fold} validates {len(index)} samples but val_dataloader yielded "
            f"{len(logits)}; set_cv_fold must make val_dataloader yield exactly `val`"
        )
    probs = torch.softmax(torch.from_numpy(logits), dim=-1).numpy()
    header = ["index", "fold", "prediction", *probability_columns(classes, probs.shape[1])]
    header.append("target")
    lines = [",".join(header)]
    for i, sample in enumerate(index):
        cells = [str(int(sample)), str(fold), str(int(logits[i].argmax()))]
        cells += [f"{p:.6f}" for p in probs[i]] + [str(int(targets[i]))]
        lines.append(",".join(cells))
    path = Path(cfg.paths.output_dir) / OOF_FILE
    _write_lines(path, lines)
    return path


def _read_rows(path: Path) -> tuple[str, list[list[str]]]:
    header, *rows = path.read_text().splitlines()
    return header, [r.split(",") for r in rows]


def fold_figures(
    fold_dir: Path, fold: int, folds: Folds
) -> tuple[str, list[list[str]], dict[str, Any]]:
    """(header, rows, figures) of a finished fold: its OOF rows and per-fold figures (samples,
    accuracy of its best checkpoint, its logged val/ metrics)."""
    path = fold_dir / OOF_FILE
    if not path.is_file():
        raise TrainwellError(f"cv: {path} not found: fold {fold} has not finished")
    header, rows = _read_rows(path)
    if [int(r[0]) for r in rows] != list(folds.val[fold]):
        raise TrainwellError(f"cv: {path} does not hold fold {fold} of folds.json")
    results = json.loads((fold_dir / "results.json").read_text())
    logged = {k: v for k, v in sorted(results["metrics"].items()) if k.startswith("val/")}
    correct = sum(r[2] == r[-1] for r in rows)
    figures = {"fold": fold, "samples": len(rows), "acc": correct / len(rows), **logged}
    return header, rows, figures


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample std (ddof=1: the spread a new fold's score would show), as the sweep
    summaries compute them; NaN where they have none."""
    stats = describe(values)
    mean, std = (stats[k] for k in ("mean", "std"))
    return (math.nan if mean is None else mean), (math.nan if std is None else std)


def assemble(out_dir: Path, fold_dirs: dict[int, Path], folds: Folds) -> dict[str, Any]:
    """`<out_dir>/oof_predictions.csv` from every fold's file, and the `cv` summary: per fold
    (samples, accuracy of its best checkpoint, its logged val/ metrics), their mean and std,
    and the out-of-fold accuracy over all samples."""
    missing = sorted(set(range(folds.k)) - set(fold_dirs))
    if missing:
        raise TrainwellError(f"cv: fold(s) {missing} of {folds.k} have no finished run to assemble")
    header, all_rows, per_fold = "", [], []
    for fold in range(folds.k):
        header, rows, figures = fold_figures(fold_dirs[fold], fold, folds)
        per_fold.append(figures)
        all_rows += rows
    all_rows.sort(key=lambda r: int(r[0]))
    _write_lines(out_dir / OOF_FILE, [header, *(",".join(r) for r in all_rows)])
    names = [k for k in per_fold[0] if k not in ("fold", "samples")]
    names = [k for k in names if all(k in f for f in per_fold)]
    stats = {k: _mean_std([float(f[k]) for f in per_fold]) for k in names}
    oof_acc = sum(r[2] == r[-1] for r in all_rows) / len(all_rows)
    return {
        "folds": folds.k,
        "seed": folds.seed,
        "stratified": folds.stratified,
        "per_fold": per_fold,
        "mean": {k: m for k, (m, _) in stats.items()},
        "std": {k: s for k, (_, s) in stats.items()},
        "oof": {"acc": oof_acc, "samples": len(all_rows)},
    }


def cv_line(cv: dict[str, Any]) -> str:
    """The figures to report, as a run and scripts/cv_assemble.py end with them."""
    acc = cv["mean"].get("acc"), cv["std"].get("acc")
    return (
        f"cv: {cv['folds']} folds, acc mean {acc[0]:.4f} ± {acc[1]:.4f} (sample std over "
        f"folds), out-of-fold {cv['oof']['acc']:.4f} over {cv['oof']['samples']} samples"
    )


def cv_metrics(cv: dict[str, Any]) -> dict[str, float]:
    """Flat names for results.json's metrics (what optimized_metric= and a sweeper read)."""
    out = {f"cv/{k}_mean": v for k, v in cv["mean"].items()}
    out |= {f"cv/{k}_std": v for k, v in cv["std"].items()}
    out["cv/acc_oof"] = cv["oof"]["acc"]
    return out
