"""Shipping a run of the engine tests' own modules (tests/owned): predict.py and export.py answer
exactly as the checkpoint's evaluation did, through the datamodule's `raw_form()` hook."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from tests.helpers.config import OWNED
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_ok
from trainwell.deploy.artifact import verify_export
from trainwell.io.results import NEW_FILE_MODE

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("owned") / "run"
    train = [*OWNED, "trainer.max_epochs=3", "print_config=false", "callbacks.early_stopping=null"]
    run_ok("train.py", run_dir, *train, env=TESTS_IMPORTABLE)
    return run_dir


def _ckpt(run: Path) -> str:
    return f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"


@pytest.fixture(scope="module")
def predictions(run: Path, tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    # No overrides but the checkpoint: the run's saved config (its search path included) is used.
    own = tmp_path_factory.mktemp("predict") / "run"
    # In-process: predict.py and export.py keep their subprocess tests in test_predict_export.py.
    proc = call_script("predict.py", _ckpt(run), f"hydra.run.dir={own}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (run / "predictions" / "test.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert header[:2] == ["index", "prediction"] and header[-1] == "target"
    return np.array([[float(c) for c in line.split(",")] for line in lines[1:]])


def test_predictions_are_the_test_split_once_each_and_match_the_test_metric(
    run: Path, predictions: np.ndarray
) -> None:
    from tests.owned.data import OwnedDigits

    index = predictions[:, 0].astype(int)
    data = OwnedDigits(seed=42)  # the run's seed (conf/train.yaml)
    data.setup()
    assert index.tolist() == data.splits["test"].tolist()  # every test sample once, in order
    assert (predictions[:, -1] == load_digits().target[index]).all()
    accuracy = float((predictions[:, 1] == predictions[:, -1]).mean())
    test_acc = json.loads((run / "results.json").read_text())["metrics"]["test/acc"]
    assert accuracy == pytest.approx(test_acc, abs=1e-6)


def test_the_export_takes_raw_digits_and_answers_as_the_predictions(
    run: Path, predictions: np.ndarray, tmp_path: Path
) -> None:
    import onnxruntime as ort

    proc = call_script("export.py", _ckpt(run), f"hydra.run.dir={tmp_path / 'export_run'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = verify_export(run / "export")
    assert manifest["input"]["form"] == "raw" and manifest["input"]["shape"] == [None, 8, 8]
    # safetensors writes 0600: every exported file ends as readable as the run dir's others
    modes = {p.name: p.stat().st_mode & 0o777 for p in (run / "export").iterdir()}
    assert set(modes.values()) == {NEW_FILE_MODE}, modes
    parity = manifest["parity"]["paths"]
    assert parity["onnxruntime"]["agreement"] == 1.0
    assert parity["onnxruntime"]["max_abs_diff"] <= 1e-4
    assert parity["torch_export"]["max_abs_diff"] <= 1e-4
    index = predictions[:, 0].astype(int)
    raw = load_digits().images[index].astype(np.float32)  # 0..16, the scaling is in the graph
    session = ort.InferenceSession(str(run / "export" / "model.onnx"))
    logits = session.run(None, {"inputs": raw})[0]
    assert logits.argmax(-1).tolist() == predictions[:, 1].astype(int).tolist()
