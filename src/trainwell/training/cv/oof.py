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
from trainwell.io.kind_rows import kind_rows
from trainwell.io.output_kind import CLASS_SCORES, OutputKind, declared_kind
from trainwell.io.results import write_text
from trainwell.loading.labels import probability_columns
from trainwell.summary.build import headline
from trainwell.summary.stats import describe
from trainwell.training.cv.folds import Folds

OOF_FILE = "oof_predictions.csv"


def _write_lines(path: Path, lines: list[str]) -> None:
    write_text(path, "\n".join(lines) + "\n")


def _raw_form(datamodule: L.LightningDataModule) -> dict[str, Any]:
    """The datamodule's raw form (the hook predict.py and export read), or {} without one."""
    raw_form = getattr(datamodule, "raw_form", None)
    form = raw_form() if callable(raw_form) else None
    return form if isinstance(form, dict) else {}


def _raw_targets(form: dict[str, Any], index: np.ndarray) -> np.ndarray | None:
    """The fold's targets as predict.py writes them: the raw form's `val` split's (in the data's
    own units: a regression's values before any standardising) when that split holds exactly the
    fold's validation samples; None otherwise (the loader's targets are written)."""
    split = (form.get("splits") or {}).get("val")
    if split is None or split[2] is None:
        return None
    _, raw_index, targets = split
    if not np.array_equal(np.asarray(raw_index), np.asarray(index)):
        return None
    return np.asarray(targets)


def _predicts_itself(module: L.LightningModule) -> bool:
    """The module overrides Lightning's predict_step: that is its prediction (Lightning's own
    default is forward on the whole batch)."""
    return type(module).predict_step is not L.LightningModule.predict_step


def _fold_outputs(
    cfg: DictConfig, folds: Folds, fold: int, ckpt_path: str
) -> tuple[np.ndarray, np.ndarray, OutputKind]:
    """(outputs, targets, what the outputs mean) of the fold's validation samples, in their index
    order: the module's predict_step on each validation batch where it defines one, else its
    forward on the batch's input."""
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
    own = _predicts_itself(module)
    outputs, targets = [], []
    with torch.inference_mode():
        for i, batch in enumerate(datamodule.val_dataloader()):
            if not isinstance(batch, list | tuple) or len(batch) != 2:
                raise TrainwellError(
                    "cv: out-of-fold predictions need (input, target) validation batches; "
                    f"{type(datamodule).__name__} yields {type(batch).__name__}"
                )
            out = module.predict_step(batch, i) if own else module(batch[0])
            if not isinstance(out, torch.Tensor):
                raise TrainwellError(
                    f"cv: {type(module).__name__}.predict_step returns {type(out).__name__}; "
                    "out-of-fold predictions need one tensor per batch (a row per sample)"
                )
            outputs.append(out.detach().cpu())
            targets.append(torch.as_tensor(batch[1]).cpu())
    form = _raw_form(datamodule)
    kind = declared_kind(module, form.get("classes"))
    raw = _raw_targets(form, folds.val_of(fold))
    return torch.cat(outputs).numpy(), torch.cat(targets).numpy() if raw is None else raw, kind


def _class_rows(
    index: np.ndarray, fold: int, logits: np.ndarray, targets: np.ndarray, classes: list[str] | None
) -> list[str]:
    probs = torch.softmax(torch.from_numpy(logits).double(), dim=-1).numpy()
    header = ["index", "fold", "prediction", *probability_columns(classes, probs.shape[1])]
    header.append("target")
    lines = [",".join(header)]
    for i, sample in enumerate(index):
        cells = [str(int(sample)), str(fold), str(int(logits[i].argmax()))]
        cells += [f"{p:.6f}" for p in probs[i]] + [str(int(targets[i]))]
        lines.append(",".join(cells))
    return lines


def _with_fold(lines: list[str], fold: int) -> list[str]:
    """predict.py's rows of another kind (index first), with the fold after the index."""
    header, *rows = (line.split(",", 1) for line in lines)
    return [f"index,fold,{header[1]}", *(f"{index},{fold},{rest}" for index, rest in rows)]


def write_fold_predictions(cfg: DictConfig, folds: Folds, fold: int, ckpt_path: str) -> Path:
    """fold_<k>/oof_predictions.csv: the rows predict.py writes for the module's kind of output
    (io/output_kind.py), with the fold after the index. Class scores: index, fold, prediction
    (the argmax), p_<class>..., target; any other kind as io/kind_rows.py writes it (values
    as predict_step returns them, labels with their probabilities, ...); the targets are the
    raw form's when it has the fold's validation samples, as predict.py writes them."""
    outputs, targets, kind = _fold_outputs(cfg, folds, fold, ckpt_path)
    index = folds.val_of(fold)
    if len(index) != len(outputs) or len(index) != len(targets):
        raise TrainwellError(
            f"cv: fold {fold} validates {len(index)} samples but val_dataloader yielded "
            f"{len(targets)} (and the module predicted {len(outputs)} rows); set_cv_fold must "
            "make val_dataloader yield exactly `val`"
        )
    if kind.kind == CLASS_SCORES:
        lines = _class_rows(index, fold, outputs.astype(np.float64), targets, kind.names)
    else:
        lines = _with_fold(kind_rows(index, outputs, targets, kind), fold)
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
    accuracy of its best checkpoint for class predictions, its logged val/ metrics at the best
    checkpoint's epoch)."""
    path = fold_dir / OOF_FILE
    if not path.is_file():
        raise TrainwellError(f"cv: {path} not found: fold {fold} has not finished")
    header, rows = _read_rows(path)
    if [int(r[0]) for r in rows] != list(folds.val[fold]):
        raise TrainwellError(f"cv: {path} does not hold fold {fold} of folds.json")
    results = json.loads((fold_dir / "results.json").read_text())
    logged = {k: v for k, v in sorted(results["metrics"].items()) if k.startswith("val/")}
    figures: dict[str, Any] = {"fold": fold, "samples": len(rows)}
    if _is_class_file(header):
        figures["acc"] = sum(r[2] == r[-1] for r in rows) / len(rows)
    return header, rows, {**figures, **logged}


def _monitor(fold_dir: Path) -> dict[str, Any] | None:
    """The metric that picked the fold's best checkpoint, and its mode (results.json)."""
    return json.loads((fold_dir / "results.json").read_text()).get("monitor")


def _is_class_file(header: str) -> bool:
    """The file holds class predictions (one predicted class and its probability columns), not
    values or per-label predictions."""
    names = header.split(",")
    return "prediction" in names and any(name.startswith("p_") for name in names)


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample std (ddof=1: the spread a new fold's score would show), as the sweep
    summaries compute them; NaN where they have none."""
    stats = describe(values)
    mean, std = (stats[k] for k in ("mean", "std"))
    return (math.nan if mean is None else mean), (math.nan if std is None else std)


def assemble(out_dir: Path, fold_dirs: dict[int, Path], folds: Folds) -> dict[str, Any]:
    """`<out_dir>/oof_predictions.csv` from every fold's file, and the `cv` summary: the
    monitored metric, per fold figures (samples, the accuracy of its best checkpoint for class
    predictions, its logged val/ metrics), their mean and std, and for class predictions the
    out-of-fold accuracy over all samples."""
    missing = sorted(set(range(folds.k)) - set(fold_dirs))
    if missing:
        raise TrainwellError(f"cv: fold(s) {missing} of {folds.k} have no finished run to assemble")
    header, all_rows, per_fold, monitor = "", [], [], None
    for fold in range(folds.k):
        header, rows, figures = fold_figures(fold_dirs[fold], fold, folds)
        monitor = monitor or _monitor(fold_dirs[fold])
        per_fold.append(figures)
        all_rows += rows
    all_rows.sort(key=lambda r: int(r[0]))
    _write_lines(out_dir / OOF_FILE, [header, *(",".join(r) for r in all_rows)])
    names = [k for k in per_fold[0] if k not in ("fold", "samples")]
    names = [k for k in names if all(k in f for f in per_fold)]
    stats = {k: _mean_std([float(f[k]) for f in per_fold]) for k in names}
    oof: dict[str, Any] = {"samples": len(all_rows)}
    if _is_class_file(header):
        oof["acc"] = sum(r[2] == r[-1] for r in all_rows) / len(all_rows)
    return {
        "folds": folds.k,
        "seed": folds.seed,
        "stratified": folds.stratified,
        "monitor": monitor,
        "per_fold": per_fold,
        "mean": {k: m for k, (m, _) in stats.items()},
        "std": {k: s for k, (_, s) in stats.items()},
        "oof": oof,
    }


def cv_line(cv: dict[str, Any]) -> str:
    """The figures to report, as a run and scripts/cv_assemble.py end with them: the monitored
    metric first (with its mode), then the out-of-fold accuracy of class predictions."""
    metric, mode = headline(cv)
    mean, std = cv["mean"].get(metric, math.nan), cv["std"].get(metric, math.nan)
    line = f"cv: {cv['folds']} folds, {metric}"
    line += f" ({mode})" if mode else ""
    line += f" mean {mean:.4f} ± {std:.4f} (sample std over folds)"
    oof = cv["oof"]
    if "acc" in oof:
        return line + f", out-of-fold acc {oof['acc']:.4f} over {oof['samples']} samples"
    return line + f", {oof['samples']} out-of-fold samples"


def cv_metrics(cv: dict[str, Any]) -> dict[str, float]:
    """Flat names for results.json's metrics (what optimized_metric= and a sweeper read)."""
    out = {f"cv/{k}_mean": v for k, v in cv["mean"].items()}
    out |= {f"cv/{k}_std": v for k, v in cv["std"].items()}
    if "acc" in cv["oof"]:
        out["cv/acc_oof"] = cv["oof"]["acc"]
    return out


def cv_weights(per_fold: dict[str, Any]) -> dict[str, Any]:
    """results.json's `weights` of a cross-validation: the weights behind the folds' val/*
    figures and the out-of-fold predictions (each fold's best checkpoint: the EMA average when
    the folds trained with one), then each fold's own record."""
    used = {str((w or {}).get("val", "unknown")) for w in per_fold.values()}
    which = used.pop() if len(used) == 1 else "mixed"
    out: dict[str, Any] = {"val": which, "oof": which}
    decays = {(w or {}).get("ema", {}).get("decay") for w in per_fold.values()} - {None}
    if len(decays) == 1:
        out["ema"] = {"decay": decays.pop()}
    return {**out, "per_fold": dict(per_fold)}
