"""A multi-label module of the engine tests' own (tests/owned/multilabel.py, `output_kind =
"label_scores"`) through predict, export and serve: per-label probabilities from the module's
scores, labels predicted at p >= 0.5, nothing argmaxed."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.helpers.config import OWNED_LABELS
from tests.helpers.kinds import (
    manifest_output,
    onnx_in_a_bare_process,
    raw_inputs,
    read_csv,
    reference_predictions,
)
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_ok
from tests.helpers.serving import running_server
from tests.owned.multilabel import LABELS

pytestmark = pytest.mark.engine

RTOL = 1e-5  # float32
RUN = (
    *OWNED_LABELS,
    "trainer.max_epochs=4",
    "print_config=false",
)


def sigmoid(x: np.ndarray) -> np.ndarray:  # written out here, not the engine's
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("labels") / "run"
    run_ok("train.py", run_dir, *RUN, env=TESTS_IMPORTABLE)
    return run_dir


def _ckpt(run: Path) -> str:
    return f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"


@pytest.fixture(scope="module")
def export(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    own = tmp_path_factory.mktemp("export") / "run"
    proc = call_script("export.py", _ckpt(run), f"hydra.run.dir={own}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "eager: label_accuracy " in proc.stdout and "onnxruntime: agreement 1" in proc.stdout
    return run / "export"


def test_predictions_are_labels_and_per_label_probabilities(run: Path, tmp_path: Path) -> None:
    proc = call_script("predict.py", _ckpt(run), f"hydra.run.dir={tmp_path / 'own'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    header, rows = read_csv(run / "predictions" / "test.csv")
    assert header == [
        "index",
        *(f"pred_{n}" for n in LABELS),
        *(f"p_{n}" for n in LABELS),
        *(f"target_{n}" for n in LABELS),
    ]
    index, scores = reference_predictions(run)
    order = np.argsort(index, kind="stable")
    assert rows[:, 0].astype(int).tolist() == index[order].tolist()
    want = sigmoid(scores[order])
    k = len(LABELS)
    np.testing.assert_allclose(rows[:, 1 + k : 1 + 2 * k], want, rtol=0, atol=5e-7)  # 6 decimals
    assert (rows[:, 1 : 1 + k] == (want >= 0.5)).all()
    assert set(np.unique(rows[:, 1 + 2 * k :])) <= {0.0, 1.0}  # the targets, per label


def test_the_export_is_the_label_scores_run_anywhere(
    run: Path, export: Path, tmp_path: Path
) -> None:
    output = manifest_output(export)
    assert output["kind"] == "label_scores" and output["names"] == LABELS
    assert output["computed_by"] == "OwnedMultiLabel.forward" and output["classes"] is None
    _, want = reference_predictions(run)
    got = onnx_in_a_bare_process(export / "model.onnx", raw_inputs(run), tmp_path)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-6)


def test_the_server_answers_per_label(run: Path, export: Path, tmp_path: Path) -> None:
    _, scores = reference_predictions(run)
    want = sigmoid(scores)
    with running_server(export, tmp_path / "serve") as url:
        answer = httpx.post(f"{url}/predict", json={"inputs": raw_inputs(run).tolist()}, timeout=60)
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert set(got) == {"predictions", "probabilities", "labels", "names"}
    np.testing.assert_allclose(got["probabilities"], want, rtol=RTOL)
    assert got["predictions"] == (want >= 0.5).astype(int).tolist()
    assert got["labels"] == [
        [n for n, on in zip(LABELS, row, strict=True) if on] for row in want >= 0.5
    ]
