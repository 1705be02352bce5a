"""Fixtures of the examples' tests: trained runs of an example, shared by the tests that read
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import shared_dir
from tests.helpers.scripts import run_script


@pytest.fixture(scope="session")
def diabetes_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short run of the regression example (experiment=diabetes_regression), shared by the
    tests that predict, export and serve it. Returns the run dir."""
    shared, lock = shared_dir(tmp_path_factory, "diabetes")
    run_dir = shared / "run"
    with lock:
        if not (shared / "train.stdout").exists():
            proc = run_script(
                "train.py",
                "experiment=diabetes_regression",
                "trainer.max_epochs=6",
                "print_config=false",
                f"hydra.run.dir={run_dir}",
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            (shared / "train.stdout").write_text(proc.stdout)
    return run_dir
