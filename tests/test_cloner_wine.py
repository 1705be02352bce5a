"""A cloner's own tabular project, written from scratch as people write one, through every command.

tests/cloner/wine/ holds it as it would sit in a clone: `src/project/wine.py` (scikit-learn's wine
data, a StandardScaler fitted on the training split whose `mean_` / `scale_` / `var_` /
`n_samples_seen_` are the datamodule's `state_dict()` as numpy, `save_hyperparameters()`,
torchmetrics, Adam + StepLR; nothing of trainwell) and its own `conf/data/wine.yaml`,
`conf/model/wine_mlp.yaml` and `conf/experiment/wine.yaml`. The slow tests copy it into a clone
and run train, eval, `resume=auto` after a SIGKILL mid-run, the doctor, `cv.folds=5`, predict,
export (the ONNX file checked by onnxruntime in a process that imports nothing of the project)
and serve (the real process, a real HTTP client, a process-group stop), each as the user types it.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import httpx
import numpy as np
import psutil
import pytest
import torch
from sklearn.datasets import load_wine

from tests.helpers.config import REPO
from tests.helpers.scripts import run_python
from tests.helpers.serving import STARTUP_TIMEOUT_S, free_port
from tests.test_bring_your_own import clone, venv_env
from trainwell.io.checkpoint_read import load_checkpoint_file
from trainwell.io.checkpoint_write import AtomicCheckpointIO

PROJECT = REPO / "tests" / "cloner" / "wine"
WINE = ("experiment=wine", "print_config=false", "trainer.deterministic=true")
SCALER = ("mean_", "scale_", "var_", "n_samples_seen_")


def wine_code() -> ModuleType:
    """The project's module, imported from its file (in a clone it is `project.wine`)."""
    spec = importlib.util.spec_from_file_location("cloner_wine", PROJECT / "src/project/wine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_same_scaler(got, want) -> None:
    for name in SCALER:
        a, b = getattr(got, name), getattr(want, name)
        assert type(a) is type(b), name
        assert np.asarray(a).dtype == np.asarray(b).dtype, name
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), name


def test_the_wine_scaler_travels_through_a_checkpoint_as_numpy(tmp_path: Path) -> None:
    """The project's datamodule state, written as every checkpoint is written and read as every
    reader reads it, rebuilds the same scaler: the same numpy arrays, the same transform."""
    wine = wine_code()
    fitted = wine.WineDataModule()
    fitted.setup("fit")
    path = tmp_path / "wine.ckpt"
    state = fitted.state_dict()
    assert isinstance(state["mean"], np.ndarray)  # kept as numpy, as the project writes it
    AtomicCheckpointIO().save_checkpoint({"state_dict": {}, "WineDataModule": state}, path)
    restored = wine.WineDataModule()
    restored.load_state_dict(load_checkpoint_file(path)["WineDataModule"])
    assert_same_scaler(restored.scaler, fitted.scaler)
    x = load_wine().data.astype(np.float32)
    assert restored.scaler.transform(x).tobytes() == fitted.scaler.transform(x).tobytes()


# -- the project in a clone, through every command ------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = clone(tmp_path_factory.mktemp("wine"))
    for path in PROJECT.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            target = root / path.relative_to(PROJECT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    assert "trainwell" not in (root / "src" / "project" / "wine.py").read_text()
    return root


def run(root: Path, script: str, *args: str, importable_tests: bool = False):
    """`python scripts/<script> args` in the clone's root with the venv active; the clone's own
    tests package importable when a test injects one of its callbacks."""
    env = venv_env()
    if importable_tests:
        env["PYTHONPATH"] = str(root)
    return run_python({"path": str(root / "scripts" / script)}, list(args), root, env)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


ONNX_OUTSIDE = """
import json, sys
import numpy as np
import onnxruntime
from sklearn.datasets import load_wine

rows = np.asarray(load_wine().data, dtype=np.float32)[json.loads(sys.argv[2])]
session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
(scores,) = session.run(None, {session.get_inputs()[0].name: rows})
print(json.dumps({"predictions": scores.argmax(1).tolist(),
                  "project_imported": any(m.split(".")[0] in ("trainwell", "project")
                                          for m in sys.modules)}))
"""


@pytest.mark.slow
def test_wine_trains_evaluates_predicts_exports_and_serves(project: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    ok(run(project, "train.py", *WINE, f"hydra.run.dir={run_dir}"))
    trained = results(run_dir)
    assert trained["test"] == "best_ckpt" and trained["metrics"]["test/acc"] >= 0.85, trained
    best = Path(trained["best_ckpt"])

    # The scaler in the checkpoint is the one fitted on the training split, as numpy, to the bit.
    wine = wine_code()
    fitted = wine.WineDataModule()
    fitted.setup("fit")
    saved = wine.WineDataModule()
    saved.load_state_dict(load_checkpoint_file(best)["WineDataModule"])
    assert_same_scaler(saved.scaler, fitted.scaler)

    ok(run(project, "eval.py", f"ckpt_path={best}", f"hydra.run.dir={tmp_path / 'eval'}"))
    assert results(tmp_path / "eval")["metrics"]["test/acc"] == trained["metrics"]["test/acc"]

    ok(run(project, "predict.py", f"ckpt_path={best}"))
    with open(run_dir / "predictions" / "test.csv") as f:
        rows = list(csv.DictReader(f))
    indices = [int(r["index"]) for r in rows]
    assert indices == sorted(fitted.idx["test"].tolist())
    predicted = [int(r["prediction"]) for r in rows]

    ok(run(project, "export.py", f"ckpt_path={best}"))
    export = run_dir / "export"
    # onnxruntime in a process of its own, isolated (-I: no PYTHONPATH, no user site, no cwd on
    # the path), reading raw rows of load_wine().data as a user of the file would.
    outside = subprocess.run(
        [sys.executable, "-I", "-c", ONNX_OUTSIDE, str(export / "model.onnx"), json.dumps(indices)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert outside.returncode == 0, outside.stderr[-3000:]
    checked = json.loads(outside.stdout)
    assert checked == {"predictions": predicted, "project_imported": False}

    raw = load_wine().data.astype(np.float32)[indices]
    with _server(project, export, tmp_path / "serve") as (proc, url):
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
        answer = httpx.post(f"{url}/predict", json={"inputs": raw.tolist()}, timeout=60)
        assert answer.status_code == 200, answer.text
        assert [int(p) for p in answer.json()["predictions"]] == predicted
        family = [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(recursive=True))]
        os.killpg(proc.pid, signal.SIGTERM)  # the whole group, as a shell's Ctrl-C or systemd
        try:
            code = proc.wait(timeout=10)  # a bound the server promises, not a timing figure
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, (tmp_path / "serve" / "server.err").read_text()[-3000:]
        _, alive = psutil.wait_procs([_proc(p) for p in family if _proc(p)], timeout=5)
        assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


def _proc(pid: int) -> psutil.Process | None:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid)
    return None


@contextlib.contextmanager
def _server(root: Path, export: Path, run_dir: Path):
    """The clone's scripts/serve.py in its own session, once /health answers; killed (the whole
    group) on the way out whatever happened."""
    port = free_port()
    run_dir.mkdir(parents=True)
    command = [sys.executable, str(root / "scripts" / "serve.py"), f"artifact={export}",
               f"port={port}", f"hydra.run.dir={run_dir}"]  # fmt: skip
    with open(run_dir / "server.out", "w") as out, open(run_dir / "server.err", "w") as err:
        proc = subprocess.Popen(
            command, cwd=root, env=venv_env(), stdout=out, stderr=err, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert proc.poll() is None, (run_dir / "server.err").read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "the server did not become healthy"
            time.sleep(0.2)
        yield proc, url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


@pytest.mark.slow
def test_wine_killed_mid_run_resumes_to_the_uninterrupted_result(
    project: Path, tmp_path: Path
) -> None:
    steps = ("callbacks.step_checkpoint.every_n_train_steps=5", "trainer.max_epochs=6")
    reference = tmp_path / "uninterrupted"
    ok(run(project, "train.py", *WINE, *steps, f"hydra.run.dir={reference}"))
    killed = tmp_path / "killed"
    killer = (
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        "+callbacks.killer.batch=27",
    )
    proc = run(project, "train.py", *WINE, *steps, *killer, f"hydra.run.dir={killed}",
               importable_tests=True)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert not (killed / "results.json").exists()
    resumed = ok(run(project, "train.py", *WINE, *steps, "resume=auto", f"hydra.run.dir={killed}"))
    assert "resume=auto: resuming from" in resumed.stdout
    got = load_checkpoint_file(killed / "checkpoints" / "last.ckpt")
    want = load_checkpoint_file(reference / "checkpoints" / "last.ckpt")
    assert got["global_step"] == want["global_step"]
    for key, value in want["state_dict"].items():
        assert torch.equal(got["state_dict"][key], value), key
    assert got["lr_schedulers"] == want["lr_schedulers"]
    assert results(killed)["metrics"]["test/acc"] == results(reference)["metrics"]["test/acc"]


@pytest.mark.slow
def test_wine_doctor_passes_and_five_folds_carry_their_own_scalers(
    project: Path, tmp_path: Path
) -> None:
    proc = run(project, "doctor.py", "experiment=wine", f"hydra.run.dir={tmp_path / 'doctor'}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "doctor" / "doctor" / "report.json").read_text())
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses["checkpoint.roundtrip"] == "pass" and "fail" not in statuses.values()

    cv = tmp_path / "cv"
    ok(run(project, "train.py", *WINE, "cv.folds=5", "trainer.max_epochs=3", f"hydra.run.dir={cv}"))
    figures = results(cv)["cv"]
    assert len(figures["per_fold"]) == 5 and figures["oof"]["samples"] == 142
    with open(cv / "oof_predictions.csv") as f:
        assert len({int(r["index"]) for r in csv.DictReader(f)}) == 142
    wine = wine_code()
    rest, _ = wine.WineDataModule().cv_samples()
    folds = json.loads((cv / "folds.json").read_text())["folds"]
    means = set()
    for k, val in enumerate(folds):
        expected = wine.WineDataModule()
        expected.set_cv_fold(np.setdiff1d(rest, val), np.asarray(val))
        expected.setup("fit")
        saved = wine.WineDataModule()
        best = cv / f"fold_{k}" / "checkpoints" / "best.ckpt"
        saved.load_state_dict(load_checkpoint_file(best)["WineDataModule"])
        assert_same_scaler(saved.scaler, expected.scaler)
        means.add(saved.scaler.mean_.tobytes())
    assert len(means) == 5  # each fold's own training part
