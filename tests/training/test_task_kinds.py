"""A regression and a multi-label module of the engine tests' own (tests/owned/values.py,
tests/owned/multilabel.py) through the commands that the deploy and cross-validation tests of each
kind leave out: eval reproduces the run's test metrics from its best checkpoint, a resume from a
mid-run step checkpoint continues bitwise, the multi-label run cross-validates and the doctor
fails nothing on it. Nothing here knows classes."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.config import OWNED_LABELS, OWNED_VALUES, QUIET_RUN, compose_config
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_script
from tests.helpers.state import assert_bitwise_equal, assert_same_results_elsewhere, final_state
from tests.owned.multilabel import LABELS
from trainwell.cli import run_training
from trainwell.training.run import train

pytestmark = [pytest.mark.engine, pytest.mark.slow]

KINDS = {"values": OWNED_VALUES, "labels": OWNED_LABELS}
RUN = ("trainer.max_epochs=2", "logger=[]", *QUIET_RUN)
EVERY_STEP = (
    "callbacks.step_checkpoint.every_n_train_steps=1",
    "callbacks.step_checkpoint.save_top_k=-1",
)


def _train(run_dir: Path, *overrides: str) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        return train(compose_config([*RUN, *overrides], run_dir))


@pytest.fixture(scope="module", params=sorted(KINDS))
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(kind, the run dir of 2 epochs with a step checkpoint after every optimizer step)."""
    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    _train(run_dir, *KINDS[request.param], *EVERY_STEP)
    return request.param, run_dir


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def test_eval_gives_the_runs_test_metrics_from_its_best_checkpoint(
    trained: tuple[str, Path], tmp_path: Path
) -> None:
    kind, run_dir = trained
    best = run_dir / "checkpoints" / "best.ckpt"
    proc = call_script(
        "eval.py", *KINDS[kind], f"ckpt_path={best}", f"hydra.run.dir={tmp_path / 'eval'}",
        env=TESTS_IMPORTABLE,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = {k: v for k, v in _results(run_dir)["metrics"].items() if k.startswith("test/")}
    got = {k: v for k, v in _results(tmp_path / "eval")["metrics"].items() if k.startswith("test/")}
    assert want and got.keys() == want.keys()
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-6, abs=1e-7), name


def test_a_resume_from_a_mid_run_step_checkpoint_continues_bitwise(
    trained: tuple[str, Path], tmp_path: Path
) -> None:
    kind, run_dir = trained
    steps = sorted((run_dir / "checkpoints").glob("step-*.ckpt"))
    source = steps[len(steps) // 2]  # in the second half of epoch 0 or the first of epoch 1
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(source, resumed / "checkpoints" / source.name)
    got = _train(resumed, *KINDS[kind], "resume=auto")
    assert_bitwise_equal(final_state(resumed), final_state(run_dir))
    assert_same_results_elsewhere(got, _results(run_dir))


def test_a_multi_label_run_cross_validates_with_plain_folds(tmp_path: Path) -> None:
    run_dir = tmp_path / "cv"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run_training(compose_config([*RUN, *KINDS["labels"], "cv.folds=2"], run_dir))
    cv = _results(run_dir)["cv"]
    assert cv["monitor"] == {"metric": "val/loss", "mode": "min"}
    assert len(cv["per_fold"]) == 2 and "val/loss" in cv["mean"]
    assert not json.loads((run_dir / "folds.json").read_text()).get("stratified")
    header, *rows = (run_dir / "oof_predictions.csv").read_text().splitlines()
    # what predict.py writes for label scores, the fold after the index; nothing argmaxed
    columns = [f"{p}_{label}" for p in ("pred", "p", "target") for label in LABELS]
    assert header.split(",") == ["index", "fold", *columns]
    assert len(rows) == cv["oof"]["samples"] == 320 and "acc" not in cv["oof"]
    for row in rows:
        cells = row.split(",")[2:]
        predicted, probs = cells[: len(LABELS)], cells[len(LABELS) : 2 * len(LABELS)]
        assert predicted == [str(int(float(p) >= 0.5)) for p in probs]
    assert "cv: 2 folds, val/loss (min) mean " in printed.getvalue()


def test_the_doctor_fails_nothing_on_a_multi_label_module(tmp_path: Path) -> None:
    run_dir = tmp_path / "doctor"
    done = run_script(
        "doctor.py", *KINDS["labels"], f"hydra.run.dir={run_dir}", env=TESTS_IMPORTABLE,
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((run_dir / "doctor" / "report.json").read_text())
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert "fail" not in statuses.values(), statuses
