"""The server and predict's `input=` check samples by one spec: the four ways they once disagreed,
each sent to the real scripts/serve.py process (as a JSON body and as a .npy body) and given to
scripts/predict.py as a .npy file, get the same line: 400 from the server, exit 2 from predict.

The model is tests/owned/data.py's OwnedRows (rows of any length: float values without a range,
or byte ids right-padded with 0), trained for an epoch; the servers serve a small ONNX graph under
the manifest input the same raw form declares."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.helpers.config import OWNED, QUIET_RUN
from tests.helpers.input_cases import FORMER_DISAGREEMENTS, owned_rows_spec
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_ok
from tests.helpers.serving import rows_export, start_server, stop_group

pytestmark = pytest.mark.engine

ROWS = "data._target_=tests.owned.data.OwnedRows"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("rows") / "run"
    run_ok(
        "train.py", run_dir, *OWNED, ROWS, "trainer.max_epochs=1", *QUIET_RUN, env=TESTS_IMPORTABLE
    )
    return run_dir


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    """A real server per raw form, its manifest input written from the raw form's spec."""
    started: dict[str, tuple[subprocess.Popen, str]] = {}
    try:
        for raw in ("values", "ids"):
            where = tmp_path_factory.mktemp(f"serve_{raw}")
            export = rows_export(where / "export", owned_rows_spec(raw).manifest())
            started[raw] = start_server(export, where / "run")
        yield {raw: url for raw, (_, url) in started.items()}
    finally:
        for proc, _ in started.values():
            stop_group(proc)


def npy_bytes(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, samples)
    return buffer.getvalue()


def served(url: str, samples: list, stored: np.ndarray) -> list[httpx.Response]:
    """The same samples as a JSON body and as a .npy body."""
    return [
        httpx.post(f"{url}/predict", json={"inputs": samples}, timeout=60),
        httpx.post(
            f"{url}/predict",
            content=npy_bytes(stored),
            headers={"content-type": "application/x-npy"},
            timeout=60,
        ),
    ]


def predicted(
    run: Path, raw: str, stored: np.ndarray, tmp_path: Path
) -> subprocess.CompletedProcess:
    np.save(tmp_path / "rows.npy", stored)
    return call_script(
        "predict.py",
        f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}",
        f"input={tmp_path / 'rows.npy'}",
        f"+data.raw={raw}",
        "overwrite=true",
        f"hydra.run.dir={tmp_path / 'predict'}",
    )


@pytest.mark.parametrize("case", list(FORMER_DISAGREEMENTS))
def test_the_server_and_predict_refuse_with_the_same_line(
    case: str, run: Path, servers: dict[str, str], tmp_path: Path
) -> None:
    raw, samples, stored, answer = FORMER_DISAGREEMENTS[case]
    for response in served(servers[raw], samples, stored):
        assert response.status_code == 400, response.text
        assert response.json() == {"error": answer}
    proc = predicted(run, raw, stored, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == f"error: input={tmp_path / 'rows.npy'}: {answer}"
    assert not (run / "predictions" / "rows.csv").exists()


def test_good_rows_are_answered_alike_by_the_server_and_predict(
    run: Path, servers: dict[str, str], tmp_path: Path
) -> None:
    rows = np.array([[4, 9, 0, 0], [2, 3, 17, 0]], dtype=np.uint8)  # ids: pixel + 1, 0 pads
    json_answer, npy_answer = served(servers["ids"], rows.tolist(), rows)
    assert json_answer.status_code == npy_answer.status_code == 200, json_answer.text
    assert json_answer.json() == npy_answer.json()
    proc = predicted(run, "ids", rows, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (run / "predictions" / "rows.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in lines[1:]] == ["0", "1"]


def test_export_checks_the_samples_of_its_parity_run_by_the_same_spec(
    run: Path, tmp_path: Path
) -> None:
    # A raw form whose declared range its own test split breaks (ids 1-17, range [0, 10]): one
    # line naming the split, exit 2, before any tracing, and no export.
    proc = call_script(
        "export.py",
        f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}",
        "+data.raw=ids",
        "+data.top_id=10",
        f"hydra.run.dir={tmp_path / 'export'}",
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: OwnedRows.raw_form()'s test split: inputs must lie in [0, 10], got values in "
        "[1, 17] (a digit's pixels in reading order)"
    )
    assert not (run / "export").exists()
