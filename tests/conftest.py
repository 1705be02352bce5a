"""Shared test fixtures. Helpers that are not fixtures live in tests/helpers/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

from tests.helpers.config import compose_config
from tests.helpers.scripts import run_script


@pytest.fixture
def cfg_factory(tmp_path: Path) -> Callable[..., DictConfig]:
    def make(overrides: list[str] | None = None, config_name: str = "train") -> DictConfig:
        return compose_config(overrides, tmp_path / "run", config_name)

    return make


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of the default experiment (`python scripts/train.py`), shared by the tests that
    read its outputs (results, checkpoints, eval, notebook). Returns the run dir; what the run
    printed is beside it, in `train.stdout` (outside the run dir, which holds only run outputs)."""
    run_dir = tmp_path_factory.mktemp("digits") / "run"
    proc = run_script("train.py", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir.parent / "train.stdout").write_text(proc.stdout)
    return run_dir
