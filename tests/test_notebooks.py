"""The notebooks run top to bottom on a real run dir (executed, not just parsed)."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.helpers.config import REPO


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
