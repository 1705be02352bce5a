"""The regression example's datamodule: its cross-validation hooks, and the example cross-validated
as a user runs it (`experiment=diabetes_regression cv.folds=K`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from project.data.diabetes import DiabetesDataModule
from tests.helpers.config import QUIET_RUN
from tests.helpers.scripts import call_script

pytestmark = pytest.mark.example("project.data.diabetes", "project.tasks.regression")


def test_cv_samples_are_the_train_and_val_split_grouped_by_target_quintile() -> None:
    dm = DiabetesDataModule()
    dm.setup()
    indices, groups = dm.cv_samples()
    rest = np.concatenate([dm.split_indices["train"], dm.split_indices["val"]])
    assert indices.tolist() == sorted(rest.tolist())  # the test split is never a fold's
    assert sorted(set(groups.tolist())) == [0, 1, 2, 3, 4]
    assert np.bincount(groups).min() >= len(indices) // 5 - 1  # quintiles: balanced groups
    _, targets = dm._load()
    means = [targets[indices][groups == g].mean() for g in range(5)]
    assert means == sorted(means)  # groups follow the target, so each fold spans its range


def test_a_fold_fits_the_target_statistics_on_its_own_training_samples_only() -> None:
    dm = DiabetesDataModule()
    dm.setup()
    test = dm.split_indices["test"]
    indices, _ = dm.cv_samples()
    train, val = indices[::2], indices[1::2]
    dm.set_cv_fold(train, val)
    dm.setup()
    _, targets = dm._load()
    assert dm.split_indices["test"].tolist() == test.tolist()
    assert dm.split_indices["val"].tolist() == val.tolist()
    assert dm.target_mean == pytest.approx(targets[train].mean(), rel=1e-12)
    assert dm.target_std == pytest.approx(targets[train].std(), rel=1e-12)
    y = dm.val_set.tensors[1].numpy()
    np.testing.assert_allclose(y * dm.target_std + dm.target_mean, targets[val], rtol=1e-5)


@pytest.mark.slow  # three folds trained
def test_the_regression_example_cross_validates_in_its_own_units(tmp_path: Path) -> None:
    run = tmp_path / "cv"
    proc = call_script(
        "train.py", "experiment=diabetes_regression", "cv.folds=3", "trainer.max_epochs=3",
        "logger=[]", *QUIET_RUN, f"hydra.run.dir={run}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cv: 3 folds, val/mae (min) mean " in proc.stdout
    cv = json.loads((run / "results.json").read_text())["cv"]
    assert cv["stratified"] is True and cv["monitor"] == {"metric": "val/mae", "mode": "min"}
    header = (run / "oof_predictions.csv").read_text().splitlines()[0]
    assert header == "index,fold,prediction,target"
    rows = np.loadtxt(run / "oof_predictions.csv", delimiter=",", skiprows=1)
    config = json.loads((run / "folds.json").read_text())
    indices, _ = DiabetesDataModule(seed=config["seed"]).cv_samples()
    assert sorted(rows[:, 0].astype(int).tolist()) == indices.tolist()  # each sample once
    _, targets = DiabetesDataModule._load()
    np.testing.assert_array_equal(rows[:, 3], targets[rows[:, 0].astype(int)])  # raw units
    for fold in cv["per_fold"]:
        mine = rows[:, 1] == fold["fold"]
        mae = np.abs(rows[mine, 2] - rows[mine, 3]).mean()  # predictions in target units
        assert mae == pytest.approx(fold["val/mae"], rel=1e-4), fold
