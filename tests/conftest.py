"""Shared test fixtures. Helpers that are not fixtures live in tests/helpers/."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock
from omegaconf import DictConfig

from tests.helpers.config import compose_config
from tests.helpers.scripts import run_script


def pytest_configure(config: pytest.Config) -> None:
    # Under pytest-xdist (`make test` runs one worker per core) each worker and every script it
    # starts gets one torch thread: two workers with two OpenMP threads each on two cores spin-wait
    # for descheduled siblings and run slower than one worker alone. Set before torch is imported.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"


def shared_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Path, FileLock]:
    """A directory every xdist worker of this session sees under the same name, and the lock that
    makes one of them build it while the others wait (one process: this session's own temp dir)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's temp dir, above the workers' own
    return root / name, FileLock(str(root / f"{name}.lock"))


@pytest.fixture
def cfg_factory(tmp_path: Path) -> Callable[..., DictConfig]:
    def make(overrides: list[str] | None = None, config_name: str = "train") -> DictConfig:
        return compose_config(overrides, tmp_path / "run", config_name)

    return make


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of the default experiment (`python scripts/train.py`), shared by the tests that
    read its outputs (results, checkpoints, eval, notebook). Returns the run dir; what the run
    printed is beside it, in `train.stdout` and `train.stderr` (outside the run dir, which holds
    only run outputs)."""
    shared, lock = shared_dir(tmp_path_factory, "digits")
    run_dir = shared / "run"
    with lock:  # one worker trains; the others read the same run when it is done
        if not (shared / "train.stdout").exists():
            proc = run_script("train.py", f"hydra.run.dir={run_dir}")
            assert proc.returncode == 0, proc.stderr[-3000:]
            (shared / "train.stderr").write_text(proc.stderr)
            (shared / "train.stdout").write_text(proc.stdout)
    return run_dir
