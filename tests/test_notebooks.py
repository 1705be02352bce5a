"""The notebooks run top to bottom on a real run dir (executed, not just parsed)."""

import json
import shutil
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers.config import REPO


@pytest.mark.slow  # a Jupyter kernel of its own
def test_run_curves_notebook_executes(digits_run: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRAINWELL_RUN_DIR", str(digits_run))
    notebook = nbformat.read(REPO / "notebooks" / "run_curves.ipynb", as_version=4)
    NotebookClient(
        notebook, timeout=120, resources={"metadata": {"path": str(REPO / "notebooks")}}
    ).execute()
    assert (digits_run / "curves.png").stat().st_size > 10_000
    printed = "".join(
        out.get("text", "") for cell in notebook.cells for out in cell.get("outputs", [])
    )
    assert "test/acc: 0.9" in printed


def test_the_newest_run_is_the_one_that_started_last_not_the_last_name(
    digits_run: Path, tmp_path: Path, monkeypatch
) -> None:
    """Without TRAINWELL_RUN_DIR the notebook plots the run whose results.json records the latest
    start, here the one whose name sorts first."""
    monkeypatch.delenv("TRAINWELL_RUN_DIR", raising=False)
    (tmp_path / "conf").mkdir()  # the notebook finds the project root by its conf/
    runs = tmp_path / "logs" / "train" / "runs"
    for name, started in (
        ("a_named_run", "2026-01-02T00:00:00.000+00:00"),
        ("z_named_run", "2026-01-01T00:00:00.000+00:00"),
    ):
        shutil.copytree(digits_run, runs / name, ignore=shutil.ignore_patterns("*.ckpt"))
        results = json.loads((runs / name / "results.json").read_text())
        results["started_at"] = started
        (runs / name / "results.json").write_text(json.dumps(results))
        (runs / name / "curves.png").unlink(missing_ok=True)
    notebook = nbformat.read(REPO / "notebooks" / "run_curves.ipynb", as_version=4)
    NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(
        out.get("text", "") for cell in notebook.cells for out in cell.get("outputs", [])
    )
    assert f"run dir: {runs / 'a_named_run'}" in printed, printed
    assert (runs / "a_named_run" / "curves.png").is_file()
    assert not (runs / "z_named_run" / "curves.png").exists()


def test_a_run_records_when_it_started(digits_run: Path) -> None:
    started = json.loads((digits_run / "results.json").read_text())["started_at"]
    assert datetime.fromisoformat(started).tzinfo is not None
