"""Cross-validation of a regression (tests/owned/values.py): float targets are values, not
classes. The folds are plain shuffled ones, the out-of-fold file holds the targets as the data
gives them and the predictions as the module's predict_step returns them, and the run leads
with the monitored metric and its mode. With EMA, results.json says which weights it used."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.config import OWNED_VALUES, QUIET_RUN, compose_config
from tests.helpers.state import load_checkpoint
from tests.owned.values import OwnedDiabetes, OwnedRegressor
from trainwell.cli import run_training
from trainwell.training.cv.folds import read_folds
from trainwell.training.cv.oof import cv_line

VALUES = [
    *OWNED_VALUES,
    "cv.folds=3",
    "trainer.max_epochs=2",
    "logger=[]",
    *QUIET_RUN,
]


def _run(run_dir: Path, *overrides: str) -> Path:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run_training(compose_config([*VALUES, *overrides], run_dir))
    run_dir.with_suffix(".stdout").write_text(printed.getvalue())
    return run_dir


@pytest.fixture(scope="module", params=["column", pytest.param("flat", marks=pytest.mark.slow)])
def cv_values(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """(N, 1) targets with EMA on; (N,) targets without."""
    run_dir = tmp_path_factory.mktemp(f"cv_{request.param}") / "run"
    if request.param == "column":
        return _run(run_dir, "ema.decay=0.9")
    return _run(run_dir, "data.column=false")


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    header, *rows = path.read_text().splitlines()
    return header.split(","), [r.split(",") for r in rows]


def test_float_targets_give_plain_folds_and_oof_rows_hold_them_as_they_are(
    cv_values: Path,
) -> None:
    folds = read_folds(cv_values / "folds.json")
    assert folds.k == 3 and not folds.stratified
    header, rows = _rows(cv_values / "oof_predictions.csv")
    assert header == ["index", "fold", "prediction", "target"]
    assert len(rows) == 354  # every train+val sample once
    for fold in range(3):
        data = OwnedDiabetes(seed=42)
        data.set_cv_fold(folds.train_of(fold), folds.val_of(fold))
        checkpoint = load_checkpoint(cv_values / f"fold_{fold}" / "checkpoints" / "best.ckpt")
        data.load_state_dict(checkpoint["OwnedDiabetes"])
        targets = data.targets("val").reshape(-1).numpy()
        mine = [r for r in rows if r[1] == str(fold)]
        assert [int(r[0]) for r in mine] == list(folds.val[fold])
        # the standardised float targets, exactly (not truncated to class ids)
        assert np.array_equal(np.array([r[3] for r in mine], dtype=np.float32), targets)
        # what predict_step answers (target units), not forward's standardised output
        config = json.loads((cv_values / f"fold_{fold}" / "results.json").read_text())
        assert config["best_ckpt"].endswith("best.ckpt")
        module = OwnedRegressor(optimizer=torch.optim.SGD, column=data.column)
        module.load_state_dict(checkpoint["state_dict"])
        module.eval()
        with torch.inference_mode():
            x = torch.stack([x for x, _ in data.val_dataloader().dataset])
            want = module.predict_step((x, None), 0).reshape(-1).numpy()
        got = np.array([r[2] for r in mine], dtype=np.float32)
        assert np.array_equal(got, want)
        assert np.abs(got).mean() > 50  # target units (~150), not standardised (~1)


@pytest.mark.slow
def test_oof_targets_are_what_predict_writes_the_raw_forms_in_their_own_units(
    tmp_path: Path,
) -> None:
    # A datamodule with a raw form: predict.py writes its targets, in target units, beside
    # predict_step's values; the out-of-fold file does the same, so |prediction - target| is the
    # fold's val/mae (before: standardised targets beside target-unit predictions).
    run_dir = _run(tmp_path / "raw", "data._target_=tests.owned.values.OwnedDiabetesRaw")
    header, rows = _rows(run_dir / "oof_predictions.csv")
    assert header == ["index", "fold", "prediction", "target"]
    _, y = OwnedDiabetes._load()
    assert [np.float32(r[3]) for r in rows] == [y[int(r[0])] for r in rows]
    per_fold = json.loads((run_dir / "results.json").read_text())["cv"]["per_fold"]
    for fold, figures in enumerate(per_fold):
        mine = [r for r in rows if r[1] == str(fold)]
        mae = np.mean([abs(float(r[2]) - float(r[3])) for r in mine])
        # the module de-normalises with fixed statistics (152, 77), the data standardises with
        # the fold's own: within 5% (standardised targets would put the MAE near 150)
        assert mae == pytest.approx(figures["val/mae"], rel=0.05)


def test_the_cv_line_and_summary_lead_with_the_monitored_metric(cv_values: Path) -> None:
    results = json.loads((cv_values / "results.json").read_text())
    cv = results["cv"]
    assert cv["monitor"] == {"metric": "val/mae", "mode": "min"}
    assert "acc" not in cv["mean"] and cv["oof"] == {"samples": 354}
    mae = [f["val/mae"] for f in cv["per_fold"]]
    assert cv["mean"]["val/mae"] == pytest.approx(np.mean(mae), abs=1e-12)
    line = (
        f"cv: 3 folds, val/mae (min) mean {cv['mean']['val/mae']:.4f} ± "
        f"{cv['std']['val/mae']:.4f} (sample std over folds), 354 out-of-fold samples"
    )
    assert cv_line(cv) == line
    assert line in cv_values.with_suffix(".stdout").read_text().splitlines()
    summary = json.loads((cv_values / "summary.json").read_text())
    assert summary["sort"]["metric"] == "val/mae" and summary["sort"]["mode"] == "min"
    assert "led by val/mae (min)" in (cv_values / "summary.md").read_text()
    # each fold's figure is its best checkpoint's epoch
    for k, figures in enumerate(cv["per_fold"]):
        fold = json.loads((cv_values / f"fold_{k}" / "results.json").read_text())
        assert figures["val/mae"] == fold["metrics"]["val/mae"]
        best = min(fold["metrics_last"]["val/mae"], figures["val/mae"])
        assert figures["val/mae"] == best


def test_results_say_which_weights_the_folds_used(cv_values: Path) -> None:
    results = json.loads((cv_values / "results.json").read_text())
    weights = results["weights"]
    per_fold = {
        f"fold_{k}": json.loads((cv_values / f"fold_{k}" / "results.json").read_text())["weights"]
        for k in range(3)
    }
    assert weights["per_fold"] == per_fold
    if cv_values.parent.name.startswith("cv_column"):
        assert weights["val"] == weights["oof"] == "ema"
        assert weights["ema"] == {"decay": 0.9}
    else:
        assert weights["val"] == weights["oof"] == "trained"
        assert "ema" not in weights
