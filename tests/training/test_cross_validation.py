"""Cross-validation (`cv.folds=K`): folds, leak refusal, out-of-fold outputs, resume.

One 4-fold digits run (in-process) is shared by the read-only tests; the kill tests and the
fold-per-job path (real subprocesses) are in test_cross_validation_kill.py (slow).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from project.data.digits import DigitsDataModule
from tests.helpers.config import compose_config
from tests.helpers.cv import CV_RUN, FOLDS, read_bytes
from tests.helpers.state import load_checkpoint
from trainwell.cli import run_training
from trainwell.errors import TrainwellError
from trainwell.training.cv.folds import assign_folds, read_folds

pytestmark = pytest.mark.example("project.data.digits")


@pytest.fixture(scope="module")
def cv_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run dir; what the run printed is in `<run dir>.stdout`."""
    run_dir = tmp_path_factory.mktemp("cv") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run_training(compose_config(CV_RUN, run_dir))
    run_dir.with_suffix(".stdout").write_text(printed.getvalue())
    return run_dir


def _digits_pool() -> tuple[np.ndarray, np.ndarray]:
    return DigitsDataModule(seed=42).cv_samples()


def test_five_folds_hold_every_train_val_index_once_stratified_and_seeded() -> None:
    indices, labels = _digits_pool()
    folds = assign_folds(indices, labels, 5, seed=42)
    val = np.concatenate([folds.val_of(k) for k in range(5)])
    assert np.array_equal(np.sort(val), np.sort(indices))  # each index in exactly one fold
    classes, whole = np.unique(labels, return_counts=True)
    label_of = dict(zip(indices.tolist(), labels.tolist(), strict=True))
    for k in range(5):
        fold_labels = np.array([label_of[i] for i in folds.val[k]])
        counts = np.array([(fold_labels == c).sum() for c in classes])
        expected = whole * len(fold_labels) / len(labels)
        assert np.abs(counts - expected).max() <= 1.0, (k, counts, expected)
        assert not set(folds.train_of(k)) & set(folds.val[k])  # never trains on its own val
        assert len(folds.train_of(k)) + len(folds.val[k]) == len(indices)
    assert assign_folds(indices, labels, 5, seed=42) == folds  # a function of the seed
    assert assign_folds(indices, labels, 5, seed=43) != folds
    test = np.setdiff1d(np.arange(1797), indices)
    assert len(test) == 360  # digits' test split stays out of every fold


def test_folds_json_and_oof_file_hold_every_sample_exactly_once(cv_run: Path) -> None:
    folds = read_folds(cv_run / "folds.json")
    indices, labels = _digits_pool()
    assert folds == assign_folds(indices, labels, FOLDS, seed=42)
    header, *rows = (cv_run / "oof_predictions.csv").read_text().splitlines()
    assert header.split(",") == [
        "index",
        "fold",
        "prediction",
        *(f"p_{c}" for c in range(10)),
        "target",
    ]
    cells = [r.split(",") for r in rows]
    assert [int(c[0]) for c in cells] == sorted(indices.tolist())  # each sample once, in order
    fold_of = {i: k for k in range(FOLDS) for i in folds.val[k]}
    label_of = dict(zip(indices.tolist(), labels.tolist(), strict=True))
    for c in cells:
        assert int(c[1]) == fold_of[int(c[0])] and int(c[-1]) == label_of[int(c[0])]
        assert abs(sum(float(p) for p in c[3:-1]) - 1.0) < 1e-5


def test_oof_accuracy_is_the_size_weighted_mean_and_each_fold_matches_its_validation(
    cv_run: Path,
) -> None:
    results = json.loads((cv_run / "results.json").read_text())
    cv = results["cv"]
    per_fold = cv["per_fold"]
    assert [f["samples"] for f in per_fold] == [360, 359, 359, 359]
    rows = [r.split(",") for r in (cv_run / "oof_predictions.csv").read_text().splitlines()[1:]]
    recount = sum(r[2] == r[-1] for r in rows) / len(rows)
    weighted = sum(f["acc"] * f["samples"] for f in per_fold) / sum(f["samples"] for f in per_fold)
    assert cv["oof"] == {"acc": pytest.approx(recount, abs=1e-12), "samples": 1437}
    assert cv["oof"]["acc"] == pytest.approx(weighted, abs=1e-6)
    for f in per_fold:  # the OOF rows are the best checkpoint's validation, sample for sample
        assert f["acc"] == pytest.approx(f["val/acc_best"], abs=1e-6)
    accs = [f["acc"] for f in per_fold]
    assert cv["mean"]["acc"] == pytest.approx(np.mean(accs), abs=1e-12)
    assert cv["std"]["acc"] == pytest.approx(np.std(accs, ddof=1), abs=1e-12)
    assert results["metrics"]["cv/acc_oof"] == cv["oof"]["acc"]
    assert results["metrics"]["cv/acc_mean"] == cv["mean"]["acc"]
    assert results["test"].startswith("skipped")  # the test split untouched
    for k in range(FOLDS):
        fold = json.loads((cv_run / f"fold_{k}" / "results.json").read_text())
        assert not any(m.startswith("test/") for m in fold["metrics"]), fold["metrics"]
        # Each fold's checkpoints are named per fold, as a plain run names its own.
        assert results["best_ckpt"][f"fold_{k}"] == fold["best_ckpt"]
        assert results["last_ckpt"][f"fold_{k}"] == fold["last_ckpt"]
        assert Path(fold["last_ckpt"]).is_file()


def test_the_run_ends_with_mean_std_and_out_of_fold_figures_and_its_summary(
    cv_run: Path,
) -> None:
    cv = json.loads((cv_run / "results.json").read_text())["cv"]
    lines = cv_run.with_suffix(".stdout").read_text().splitlines()
    assert lines[-2:] == [
        f"cv: {FOLDS} folds, val/acc (max) mean {cv['mean']['val/acc']:.4f} ± "
        f"{cv['std']['val/acc']:.4f} (sample std over folds), out-of-fold acc "
        f"{cv['oof']['acc']:.4f} over 1437 samples",
        f"run dir: {cv_run}",
    ]
    summary = json.loads((cv_run / "summary.json").read_text())
    assert summary["kind"] == "cv" and summary["cv"] == {"folds": FOLDS, "oof": cv["oof"]}
    (group,) = summary["groups"]
    assert group["n"] == FOLDS and group["jobs"] == [f"fold_{k}" for k in range(FOLDS)]
    for name in ("acc", "val/acc", "val/loss"):
        assert group["metrics"][name]["mean"] == cv["mean"][name]
        assert group["metrics"][name]["std"] == cv["std"][name]
    assert "| n | val/acc |" in (cv_run / "summary.md").read_text()
    assert summary["sort"] == {"metric": "val/acc", "mode": "max"}
    assert (cv_run / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_oof_probability_columns_are_named_as_predictions_name_them(tmp_path: Path) -> None:
    """A datamodule naming its classes (a cloner's `class_0`...): the out-of-fold file and
    predict.py's files share one naming."""
    from trainwell.deploy.predict import _rows

    run = [
        *CV_RUN,
        "cv.folds=2",
        "data._target_=tests.helpers.cv_digits.NamedClassDigits",
        "trainer.limit_train_batches=2",
    ]
    run_training(compose_config(run, tmp_path))
    header = (tmp_path / "oof_predictions.csv").read_text().splitlines()[0].split(",")
    classes = [f"class_{c}" for c in range(10)]
    predicted = _rows(np.arange(1), np.zeros((1, 10)), np.zeros(1), classes)[0].split(",")
    assert header[3:-1] == predicted[2:-1] == [f"p_class_{c}" for c in range(10)]


def test_each_folds_checkpoints_carry_statistics_of_its_training_part_only(cv_run: Path) -> None:
    folds = read_folds(cv_run / "folds.json")
    images, _ = DigitsDataModule._load()
    means = set()
    for k in range(FOLDS):
        train_part = images[folds.train_of(k)]
        want = {"mean": float(train_part.mean()), "std": float(train_part.std())}
        for name in ("best.ckpt", "last.ckpt"):
            state = load_checkpoint(cv_run / f"fold_{k}" / "checkpoints" / name)
            assert state["DigitsDataModule"] == want, (k, name)
        means.add(want["mean"])
    assert len(means) == FOLDS


@pytest.mark.parametrize("leaky", ["AllDataDigits", "TrainValDigits"])
def test_statistics_fitted_beyond_the_folds_training_part_are_refused(
    tmp_path: Path, leaky: str
) -> None:
    run_dir = tmp_path / "run"
    cfg = compose_config([*CV_RUN, f"data._target_=tests.helpers.cv_digits.{leaky}"], run_dir)
    with pytest.raises(TrainwellError, match="fits its state \\(mean, std\\) on"):
        run_training(cfg)
    assert not list(run_dir.glob("fold_*"))  # refused before any fold trained


@pytest.mark.example("project.data.synthetic")
def test_a_datamodule_without_the_hook_gets_one_line_naming_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cfg = compose_config(["data=synthetic", "cv.folds=3"], run_dir)
    with pytest.raises(TrainwellError) as err:
        run_training(cfg)
    assert "SyntheticDataModule has no cv_samples()" in str(err.value)
    assert "\n" not in str(err.value)
    assert not (run_dir / "folds.json").exists()


def test_resume_reruns_no_finished_fold_and_continues_the_interrupted_one_exactly(
    cv_run: Path, tmp_path: Path
) -> None:
    """fold_2 stopped after its step checkpoint at step 2; fold_3 never started."""
    run_dir = tmp_path / "run"
    shutil.copytree(cv_run, run_dir)
    for name in ("results.json", "oof_predictions.csv"):
        (run_dir / name).unlink()
    shutil.rmtree(run_dir / "fold_3")
    interrupted = run_dir / "fold_2"
    for path in interrupted.iterdir():
        if path.name != "checkpoints":
            path.unlink()
    (interrupted / "checkpoints" / "last.ckpt").unlink()
    (interrupted / "checkpoints" / "best.ckpt").unlink()
    steps = sorted(p.name for p in (interrupted / "checkpoints").iterdir())
    assert steps == ["step-0000004.ckpt"], steps  # mid-epoch: 4 of 6 optimizer steps
    finished = {
        k: (run_dir / f"fold_{k}" / "checkpoints" / "last.ckpt").stat().st_mtime_ns for k in (0, 1)
    }
    run_training(compose_config([*CV_RUN, "resume=auto"], run_dir))
    for k, mtime in finished.items():  # finished folds were not trained again
        assert (run_dir / f"fold_{k}" / "checkpoints" / "last.ckpt").stat().st_mtime_ns == mtime
    assert read_bytes(run_dir) == read_bytes(cv_run)
    for k in (2, 3):
        got = load_checkpoint(run_dir / f"fold_{k}" / "checkpoints" / "last.ckpt")["state_dict"]
        want = load_checkpoint(cv_run / f"fold_{k}" / "checkpoints" / "last.ckpt")["state_dict"]
        assert all(torch.equal(got[n], want[n]) for n in want)


def test_default_run_has_no_cross_validation() -> None:
    cfg = compose_config([])
    assert cfg.cv.folds is None and cfg.cv.fold is None


def test_eval_refuses_a_folds_checkpoint_in_one_line(cv_run: Path) -> None:
    from trainwell.training.evaluate import evaluate

    ckpt = cv_run / "fold_1" / "checkpoints" / "best.ckpt"
    cfg = compose_config([f"ckpt_path={ckpt}"], cv_run / "eval", config_name="eval")
    with pytest.raises(TrainwellError, match="is a cross-validation fold's checkpoint"):
        evaluate(cfg)


@pytest.mark.parametrize("command", ["predict.py", "export.py"])
def test_shipping_refuses_a_folds_checkpoint_in_one_line(cv_run: Path, command: str) -> None:
    from trainwell.io.named_paths import deployed_checkpoint

    ckpt = cv_run / "fold_1" / "checkpoints" / "best.ckpt"
    cfg = {"ckpt_path": str(ckpt)}
    with pytest.raises(TrainwellError, match=f"fold's checkpoint; {command} reads plain runs"):
        deployed_checkpoint(cfg, command)
