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

import lightning as L
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
from trainwell.io.checkpoint_state import NUMPY_GLOBALS

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


@pytest.fixture(scope="module")
def numpy_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """results.json of a run whose datamodule keeps its statistics as numpy."""
    return _train_numpy_run(tmp_path_factory.mktemp("numpy") / "run")


def _same_stats(loaded: dict, saved: dict) -> None:
    assert list(loaded) == list(saved)
    for key, value in saved.items():
        assert type(loaded[key]) is type(value), key
        assert np.asarray(loaded[key]).tobytes() == np.asarray(value).tobytes(), key
        if isinstance(value, np.ndarray):
            assert loaded[key].dtype == value.dtype and loaded[key].shape == value.shape


def _fitted_datamodule(run_dir: Path) -> NumpyStatsDigits:
    fresh = instantiate(OmegaConf.load(run_dir / ".hydra" / "config.yaml").data)
    assert type(fresh) is NumpyStatsDigits
    fresh.setup("fit")
    return fresh


def test_numpy_statistics_train_and_test_and_come_back_as_numpy_to_the_bit(numpy_run: dict) -> None:
    results = numpy_run
    run_dir = Path(results["best_ckpt"]).parents[1]
    # Testing the best checkpoint handed its statistics to load_state_dict as numpy (the
    # datamodule refuses anything else).
    assert results["test"] == "best_ckpt" and "test/acc" in results["metrics"]
    fresh = _fitted_datamodule(run_dir)
    _same_stats(load_checkpoint_file(results["best_ckpt"])["NumpyStatsDigits"], fresh.stats)


def test_a_plain_torch_load_under_numpys_allowlist_gives_the_datamodule_its_arrays(
    numpy_run: dict,
) -> None:
    """No trainwell reader: torch's own weights-only load, with numpy's arrays and scalars
    allowed, hands the datamodule's load_state_dict what it saved (it refuses anything else)."""
    with torch.serialization.safe_globals(NUMPY_GLOBALS):
        checkpoint = torch.load(numpy_run["best_ckpt"], map_location="cpu", weights_only=True)
    run_dir = Path(numpy_run["best_ckpt"]).parents[1]
    fitted = _fitted_datamodule(run_dir)
    fresh = instantiate(OmegaConf.load(run_dir / ".hydra" / "config.yaml").data)
    fresh.load_state_dict(checkpoint["NumpyStatsDigits"])
    _same_stats(fresh.stats, fitted.stats)


def test_bare_lightning_resuming_a_trainwell_checkpoint_hands_the_datamodule_its_arrays(
    numpy_run: dict,
) -> None:
    """A plain Lightning Trainer, none of trainwell's callbacks or checkpoint IO, resumes the
    run's last checkpoint: Lightning's own load (weights-only, numpy allowed) gives the
    datamodule's load_state_dict its numpy values, which it checks, and training goes on."""
    run_dir = Path(numpy_run["last_ckpt"]).parents[1]
    config = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    datamodule, module = instantiate(config.data), instantiate(config.model)
    trainer = L.Trainer(
        max_epochs=2, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu", devices=1,
    )  # fmt: skip
    with torch.serialization.safe_globals(NUMPY_GLOBALS):
        trainer.fit(
            module, datamodule=datamodule, ckpt_path=numpy_run["last_ckpt"], weights_only=True
        )
    assert trainer.current_epoch == 2
    _same_stats(datamodule.stats, _fitted_datamodule(run_dir).stats)


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

    # A checkpoint holding an object among its hparams (written elsewhere) is refused, naming
    # a command; the command, run as printed, re-saves it so that eval.py gives the same metrics.
    old = best.with_name("old.ckpt")
    checkpoint = load_checkpoint_file(best)
    checkpoint["hyper_parameters"]["loss"] = torch.nn.CrossEntropyLoss()
    torch.save(checkpoint, old)  # pickles the object (and the numpy values, as they are)
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
    """numpy pickled as torch.save pickles it (plain Lightning, an earlier release) is read as
    it is; the refusal's command on the case it names (an object among the hparams),
    in-process: the numpy state comes back as numpy after the re-save."""
    from trainwell.io.hparams import main as convert

    state = {"mean": np.arange(4, dtype=np.float32), "n": np.int64(3)}
    pickled, old, new = tmp_path / "numpy.ckpt", tmp_path / "old.ckpt", tmp_path / "new.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1)}, "MyData": state}, pickled)
    read = load_checkpoint_file(pickled)["MyData"]
    assert type(read["n"]) is np.int64 and read["mean"].tobytes() == state["mean"].tobytes()
    # An empty array, pickled as torch pickles it, needs more than numpy's allowlist (a call of
    # bytes()): the converter writes it as data.
    state["none"] = np.zeros((0, 3))
    objects = {"loss": torch.nn.CrossEntropyLoss()}
    torch.save(
        {"state_dict": {"w": torch.ones(1)}, "MyData": state, "hyper_parameters": objects}, old
    )
    with pytest.raises(CheckpointError, match=re.escape("python -m trainwell.io.hparams")):
        load_checkpoint_file(old)
    assert convert([str(old), str(new)]) == 0
    loaded = load_checkpoint_file(new)["MyData"]
    assert type(loaded["n"]) is np.int64 and loaded["mean"].dtype == np.float32
    assert loaded["mean"].tobytes() == state["mean"].tobytes()
    assert convert([str(new), str(tmp_path / "twice.ckpt")]) == 0  # converting again: the same
    twice = load_checkpoint_file(tmp_path / "twice.ckpt")["MyData"]
    assert twice["n"] == np.int64(3) and twice["none"].shape == (0, 3)  # written as data, once


@pytest.mark.slow
def test_resume_auto_over_an_earlier_releases_checkpoints_continues_after_the_named_command(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    _train_numpy_run(run_dir)
    for path in (run_dir / "checkpoints").glob("*.ckpt"):  # an object among the hparams
        checkpoint = load_checkpoint_file(path)
        checkpoint["hyper_parameters"]["loss"] = torch.nn.CrossEntropyLoss()
        torch.save(checkpoint, path)
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
