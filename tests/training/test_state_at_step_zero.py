"""A datamodule that keeps its fitted statistics as numpy trains, tests and evaluates; one that keeps
an object no checkpoint can hold is stopped at step 0, and the doctor says the same.

The run writes the checkpoint it will write later into memory and reads it back with the loader
resume, eval, predict and export use, before its first training step: what would fail after the
whole fit fails there, in one line naming the key and its type (exit 2).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tests.helpers.config import OWNED, QUIET_RUN
from tests.helpers.doctor import QUICK_PROBES, run_ids
from tests.helpers.scripts import TESTS_IMPORTABLE, run_python, run_script
from tests.owned.stateful_data import NumpyStatsDigits
from trainwell.io.checkpoint_read import CheckpointError, load_checkpoint_file

pytestmark = pytest.mark.engine

STATEFUL = "tests.owned.stateful_data"
SHORT = (*OWNED, *QUIET_RUN, "trainer.max_epochs=1", "trainer.deterministic=true")
NUMPY_DATA = f"data._target_={STATEFUL}.NumpyStatsDigits"
SCALER_DATA = f"data._target_={STATEFUL}.FittedScalerDigits"


def _script(script: str, *overrides: str):
    return run_script(script, *overrides, env=TESTS_IMPORTABLE)


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _train_numpy_run(run_dir: Path) -> dict:
    proc = _script("train.py", *SHORT, NUMPY_DATA, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "results.json").read_text())


def test_numpy_statistics_train_and_test_and_come_back_as_numpy_to_the_bit(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    results = _train_numpy_run(run_dir)
    # Testing the best checkpoint handed its statistics to load_state_dict as numpy (the
    # datamodule refuses anything else).
    assert results["test"] == "best_ckpt" and "test/acc" in results["metrics"]
    fresh = instantiate(OmegaConf.load(run_dir / ".hydra" / "config.yaml").data)
    assert type(fresh) is NumpyStatsDigits
    fresh.setup("fit")
    saved = load_checkpoint_file(results["best_ckpt"])["NumpyStatsDigits"]
    assert list(saved) == list(fresh.stats)
    for key, value in fresh.stats.items():
        assert type(saved[key]) is type(value), key
        assert np.asarray(saved[key]).tobytes() == np.asarray(value).tobytes(), key
        if isinstance(value, np.ndarray):
            assert saved[key].dtype == value.dtype and saved[key].shape == value.shape


@pytest.mark.slow
def test_eval_of_numpy_statistics_and_an_old_checkpoint_re_saved_as_the_refusal_says(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    results = _train_numpy_run(run_dir)
    best = Path(results["best_ckpt"])
    proc = _script("eval.py", f"ckpt_path={best}", f"hydra.run.dir={tmp_path / 'eval'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    evaluated = json.loads((tmp_path / "eval" / "results.json").read_text())["metrics"]
    assert evaluated["test/loss"] == results["metrics"]["test/loss"]

    # A checkpoint as an earlier release wrote it (numpy pickled) is refused, naming a command;
    # the command, run as printed, re-saves it so that eval.py gives the same metrics.
    old = best.with_name("old.ckpt")
    torch.save(load_checkpoint_file(best), old)  # pickles the numpy values
    proc = _script("eval.py", f"ckpt_path={old}", f"hydra.run.dir={tmp_path / 'eval_old'}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = _errors(proc.stderr)
    command = re.search(r"python -m trainwell\.io\.hparams \S+ <new\.ckpt>", line)
    assert command and "numpy" in line, line
    new = best.with_name("new.ckpt")
    argv = shlex.split(command.group(0).replace("<new.ckpt>", str(new)))
    assert argv[:3] == ["python", "-m", "trainwell.io.hparams"]
    env = {**os.environ, **TESTS_IMPORTABLE}
    converted = run_python({"module": argv[2]}, argv[3:], tmp_path, env)
    assert converted.returncode == 0, converted.stderr
    proc = _script("eval.py", f"ckpt_path={new}", f"hydra.run.dir={tmp_path / 'eval_new'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads((tmp_path / "eval_new" / "results.json").read_text())["metrics"]
    assert again["test/loss"] == results["metrics"]["test/loss"]


def test_a_value_no_checkpoint_can_hold_stops_the_run_before_its_first_training_step(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    # The killer ends the process after the first training batch: a run that got that far
    # would die by SIGKILL instead of exiting 2.
    killer = ("+callbacks.killer._target_=tests.helpers.killer.KillAt", "+callbacks.killer.batch=0")
    proc = _script("train.py", *SHORT, SCALER_DATA, *killer, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    (line,) = _errors(proc.stderr)
    assert line.startswith(
        "error: checkpoint['FittedScalerDigits']['scaler'] (FittedScalerDigits.state_dict()) "
        "is a sklearn.preprocessing._data.StandardScaler"
    ), line
    assert line.endswith("stopped before the first training step"), line
    assert not list(run_dir.glob("checkpoints/*")) and not (run_dir / "results.json").exists()


@pytest.mark.parametrize(
    ("data", "status"), [(NUMPY_DATA, "pass"), (SCALER_DATA, "fail")], ids=["numpy", "scaler"]
)
def test_the_doctor_judges_the_datamodules_state_as_the_run_does(
    data: str, status: str, tmp_path: Path
) -> None:
    checks = run_ids(tmp_path, [*OWNED, data, *QUICK_PROBES], ["checkpoint.roundtrip"])
    check = checks["checkpoint.roundtrip"]
    assert check.status == status, check.message
    if status == "fail":
        assert check.message.startswith("checkpoint['FittedScalerDigits']['scaler']"), check
        assert "StandardScaler" in check.message and "before the first training step" in (
            check.message
        )


def test_a_refused_checkpoint_names_the_converter_and_the_converter_reads_back_numpy(
    tmp_path: Path,
) -> None:
    """The refusal's command on the case it names, in-process: numpy pickled by an earlier
    release comes back as numpy after the re-save."""
    from trainwell.io.hparams import main as convert

    state = {"mean": np.arange(4, dtype=np.float32), "n": np.int64(3)}
    old, new = tmp_path / "old.ckpt", tmp_path / "new.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1)}, "MyData": state}, old)
    with pytest.raises(CheckpointError, match=re.escape("python -m trainwell.io.hparams")):
        load_checkpoint_file(old)
    assert convert([str(old), str(new)]) == 0
    loaded = load_checkpoint_file(new)["MyData"]
    assert type(loaded["n"]) is np.int64 and loaded["mean"].dtype == np.float32
    assert loaded["mean"].tobytes() == state["mean"].tobytes()
    assert convert([str(new), str(tmp_path / "twice.ckpt")]) == 0  # converting again: the same
    assert load_checkpoint_file(tmp_path / "twice.ckpt")["MyData"]["n"] == np.int64(3)


@pytest.mark.slow
def test_resume_auto_over_an_earlier_releases_checkpoints_continues_after_the_named_command(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    _train_numpy_run(run_dir)
    for path in (run_dir / "checkpoints").glob("*.ckpt"):  # as an earlier release wrote them
        torch.save(load_checkpoint_file(path), path)
    longer = (*SHORT, NUMPY_DATA, "trainer.max_epochs=2", "resume=auto", f"hydra.run.dir={run_dir}")
    proc = _script("train.py", *longer)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = _errors(proc.stderr)
    command = re.search(r"python -m trainwell\.io\.hparams \S+ \S+\.ckpt", line)
    assert command, line
    argv = shlex.split(command.group(0))
    env = {**os.environ, **TESTS_IMPORTABLE}
    converted = run_python({"module": argv[2]}, argv[3:], tmp_path, env)
    assert converted.returncode == 0, converted.stderr
    proc = _script("train.py", *longer)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resume=auto: resuming from {argv[4]}" in proc.stdout
    assert json.loads((run_dir / "results.json").read_text())["finished_at"]["epoch"] == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("data", "code"), [(NUMPY_DATA, 0), (SCALER_DATA, 2)], ids=["numpy", "scaler"]
)
def test_on_two_ranks_numpy_state_trains_and_a_value_no_checkpoint_can_hold_stops_every_rank(
    data: str, code: int, tmp_path: Path
) -> None:
    """Rank 0 writes the checkpoint and so makes the step-0 save: every rank goes on with it or
    stops with its line (no rank left waiting in a collective)."""
    run_dir = tmp_path / "run"
    proc = _script("train.py", *SHORT, data, "trainer=ddp_sim", f"hydra.run.dir={run_dir}")
    assert proc.returncode == code, proc.stderr[-3000:]
    if code == 0:
        saved = load_checkpoint_file(run_dir / "checkpoints" / "last.ckpt")["NumpyStatsDigits"]
        assert type(saved["mean"]) is np.ndarray and type(saved["count"]) is np.int64
    else:
        lines = _errors(proc.stderr)
        assert len(lines) == 1, lines  # one line per run, not per rank
        assert lines[0].startswith("error: checkpoint['FittedScalerDigits']['scaler']")
