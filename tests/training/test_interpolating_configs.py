"""A data config written as lightning-hydra-template writes them reads values from other groups
(`data_dir: ${paths.data_dir}/...`, `${trainer.max_epochs}`, the seed at the top, the template's
`${tw.num_classes:...}` resolver in the model): every command resolves the run's whole config
before it selects the parts it needs, so each one answers as training did."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from sklearn.datasets import load_digits

from tests.helpers.config import QUIET_RUN, TEST_CONF
from tests.helpers.scripts import call_script
from tests.helpers.serving import running_server
from trainwell.deploy.artifact import verify_export

pytestmark = pytest.mark.engine  # the engine tests' own modules (tests/owned)

INTERPOLATING = (f"hydra.searchpath=[file://{TEST_CONF}]", "data=owned_lht", "model=owned")


def _ok(script: str, *overrides: str) -> None:
    proc = call_script(script, *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("lht") / "run"
    _ok("train.py", *INTERPOLATING, "trainer.max_epochs=2", *QUIET_RUN, f"hydra.run.dir={run_dir}")
    return run_dir


def _ckpt(run: Path) -> str:
    return f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"


def test_eval_reads_the_runs_interpolating_config(run: Path, tmp_path: Path) -> None:
    _ok("eval.py", _ckpt(run), f"hydra.run.dir={tmp_path / 'eval'}")
    trained = json.loads((run / "results.json").read_text())["metrics"]["test/acc"]
    evaluated = json.loads((tmp_path / "eval" / "results.json").read_text())["metrics"]
    assert evaluated["test/acc"] == pytest.approx(trained, abs=1e-6)


def test_predict_reads_the_runs_interpolating_config(run: Path) -> None:
    _ok("predict.py", _ckpt(run))
    assert (run / "predictions" / "test.csv").read_text().startswith("index,prediction")


def test_export_writes_the_runs_config_resolved_in_its_manifest(run: Path) -> None:
    _ok("export.py", _ckpt(run))
    manifest = verify_export(run / "export")
    data = manifest["config"]["data"]
    assert data["data_dir"] == str(Path.cwd() / "data" / "digits")  # paths.root_dir: launch dir
    assert data["samples_per_epoch"] == 2 and data["seed"] == manifest["config"]["seed"] == 42
    assert manifest["config"]["model"]["num_classes"] == 10


@pytest.mark.slow  # a run per fold
def test_cross_validation_runs_each_fold_on_the_interpolating_config(tmp_path: Path) -> None:
    run_dir = tmp_path / "cv"
    _ok(
        "train.py", *INTERPOLATING, "cv.folds=2", "trainer.max_epochs=1", *QUIET_RUN,
        "logger=[]", f"hydra.run.dir={run_dir}",
    )  # fmt: skip
    results = json.loads((run_dir / "results.json").read_text())
    assert results["cv"]["folds"] == 2 and len(results["cv"]["per_fold"]) == 2


@pytest.mark.slow  # every probe of the doctor
def test_the_doctor_passes_the_interpolating_config(tmp_path: Path) -> None:
    # The owned model's StepLR would be spent before the probes' run ends: a verdict on the
    # model, not on the config (schedule.interval), so this run has a constant LR.
    _ok(
        "doctor.py", *INTERPOLATING, "model.scheduler=null", "probe.overfit_steps=12",
        "probe.memory_steps=4", f"hydra.run.dir={tmp_path / 'doctor'}",
    )  # fmt: skip


@pytest.mark.slow  # a server process
def test_the_export_of_the_interpolating_config_is_served(run: Path, tmp_path: Path) -> None:
    if not (run / "export" / "manifest.json").is_file():
        _ok("export.py", _ckpt(run))
    images = load_digits().images[:3].tolist()
    with running_server(run / "export", tmp_path / "serve") as url:
        answer = httpx.post(f"{url}/predict", json={"inputs": images}, timeout=30).json()
    assert len(answer["predictions"]) == 3
