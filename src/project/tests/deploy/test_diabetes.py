"""The regression example (experiment=diabetes_regression) through predict, export and serve:
every answer is the task's predict_step, in the target's units, never argmaxed."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.helpers.kinds import (
    manifest_output,
    onnx_in_a_bare_process,
    raw_inputs,
    read_csv,
    reference_predictions,
)
from tests.helpers.scripts import call_script
from tests.helpers.serving import running_server

pytestmark = pytest.mark.example("project.data.diabetes", "project.tasks.regression")

RTOL = 1e-5  # float32


def _ckpt(run: Path) -> str:
    return f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"


@pytest.fixture(scope="module")
def predictions(diabetes_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    own = tmp_path_factory.mktemp("predict") / "run"
    proc = call_script("predict.py", _ckpt(diabetes_run), f"hydra.run.dir={own}", "overwrite=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return diabetes_run / "predictions" / "test.csv"


@pytest.fixture(scope="module")
def export(diabetes_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    own = tmp_path_factory.mktemp("export") / "run"
    proc = call_script("export.py", _ckpt(diabetes_run), f"hydra.run.dir={own}", "overwrite=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return diabetes_run / "export", proc.stdout


def test_predictions_are_predict_step_in_target_units(
    diabetes_run: Path, predictions: Path
) -> None:
    header, rows = read_csv(predictions)
    assert header == ["index", "prediction", "target"]  # one value: no class columns
    index, want = reference_predictions(diabetes_run)
    order = np.argsort(index, kind="stable")
    assert rows[:, 0].astype(int).tolist() == index[order].tolist()
    np.testing.assert_allclose(rows[:, 1], want[order, 0], rtol=RTOL)
    assert rows[:, 1].std() > 1.0 and rows[:, 2].min() >= 25  # target units, not class ids
    mae = float(np.abs(rows[:, 1] - rows[:, 2]).mean())
    results = json.loads((diabetes_run / "results.json").read_text())
    assert mae == pytest.approx(results["metrics"]["test/mae"], rel=1e-5)


def test_the_export_computes_predict_step_and_says_so(
    diabetes_run: Path, export: tuple[Path, str], tmp_path: Path
) -> None:
    export_dir, printed = export
    output = manifest_output(export_dir)
    assert output["kind"] == "values" and output["names"] == ["progression"]
    assert output["computed_by"] == "RegressionTask.predict_step"
    assert output["classes"] is None and "class" not in output["meaning"]
    assert "eager: mae " in printed and "accuracy" not in printed
    _, want = reference_predictions(diabetes_run)
    got = onnx_in_a_bare_process(export_dir / "model.onnx", raw_inputs(diabetes_run), tmp_path)
    np.testing.assert_allclose(got, want, rtol=RTOL)


@pytest.mark.slow
def test_the_server_answers_predict_step_values_without_probabilities(
    diabetes_run: Path, export: tuple[Path, str], tmp_path: Path
) -> None:
    _, want = reference_predictions(diabetes_run)
    with running_server(export[0], tmp_path / "serve") as url:
        answer = httpx.post(
            f"{url}/predict", json={"inputs": raw_inputs(diabetes_run).tolist()}, timeout=60
        )
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert set(got) == {"predictions", "names"} and got["names"] == ["progression"]
    np.testing.assert_allclose(got["predictions"], want[:, 0], rtol=RTOL)
