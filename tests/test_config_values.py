"""A wrong type or an out-of-range value for a config key: one line naming the key, the value and
what is expected, exit 2, before any data loads (through the real scripts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.config import CONF, with_baseline
from tests.helpers.scripts import call_script, run_script
from trainwell.command_line import check_command_line

CASES = [
    ("data.batch_size=abc", "data.batch_size='abc' is invalid: expected an integer >= 1"),
    ("trainer.max_epochs=abc", "trainer.max_epochs='abc' is invalid: expected an integer >= -1"),
    ("model.optimizer.lr=abc", "model.optimizer.lr='abc' is invalid: expected a number >= 0"),
    (
        "trainer.accumulate_grad_batches=0",
        "trainer.accumulate_grad_batches=0 is invalid: expected an integer >= 1",
    ),
    # a `_target_`'s own arguments, checked against its __init__ annotations
    (
        "data.val_fraction=abc",
        "data.val_fraction='abc' is invalid: DigitsDataModule expects val_fraction: float",
    ),
    ("model.net.width=abc", "model.net.width='abc' is invalid: DigitsCNN expects width: int"),
    # the template's own knobs: both ends of a range, the type, the choices
    ("cv.folds=abc", "cv.folds='abc' is invalid: expected an integer >= 2"),
    ("cv.folds=1", "cv.folds=1 is invalid: expected an integer >= 2"),
    ("cv.fold=-1", "cv.fold=-1 is invalid: expected an integer >= 0"),
    ("cv.fold=0", "cv.fold=0 needs cv.folds, the number of folds it is one of"),
    ("cv.fold=3 cv.folds=3", "cv.fold=3: choose a fold from 0 to 2 (cv.folds=3)"),
    ("ema.decay=1.5", "ema.decay=1.5 is invalid: expected a number in [0, 1]"),
    ("ema.decay=-0.1", "ema.decay=-0.1 is invalid: expected a number in [0, 1]"),
    ("monitor.mode=minimum", "monitor.mode='minimum' is invalid: expected one of min, max"),
    ("lr_scaling.rule=cubic", "lr_scaling.rule='cubic' is invalid: expected one of none, linear"),
    ("lr_scaling.reference_batch=0", "lr_scaling.reference_batch=0 is invalid: expected an"),
    ("test=maybe", "test='maybe' is invalid: expected true or false"),
]

# A value at each end of every range the table allows: none of them is refused.
GOOD = [
    "cv.folds=2", "cv.fold=0 cv.folds=2", "cv.fold=1 cv.folds=2", "ema.decay=0", "ema.decay=1", "ema.decay=null",
    "monitor.mode=min", "lr_scaling.rule=sqrt", "lr_scaling.reference_batch=1", "test=false",
]  # fmt: skip


def test_a_serve_knob_outside_its_choices_is_one_line_before_any_import() -> None:
    problem = check_command_line(CONF, "serve", ["artifact=x", "ort_spin=sometimes"])
    assert problem == "ort_spin='sometimes' is invalid: expected one of always, run, never"
    assert check_command_line(CONF, "serve", ["artifact=x", "ort_spin=run"]) is None


def test_a_summary_mode_outside_min_max_is_one_line_before_any_run() -> None:
    problem = check_command_line(CONF, "train", with_baseline(["summary.mode=maximize"]))
    assert problem == "summary.mode='maximize' is invalid: expected one of min, max, null"
    assert check_command_line(CONF, "train", with_baseline(["summary.mode=min"])) is None


@pytest.mark.parametrize(("override", "expected"), CASES)
def test_the_command_line_check_names_key_value_and_expectation(
    override: str, expected: str
) -> None:
    problem = check_command_line(CONF, "train", with_baseline(override.split()))
    assert problem is not None and problem.startswith(expected), problem


def test_good_values_and_a_users_unannotated_arguments_pass() -> None:
    assert (
        check_command_line(
            CONF, "train", with_baseline(["data.batch_size=8", "model.optimizer.lr=1"])
        )
        is None
    )
    assert check_command_line(CONF, "train", with_baseline(["trainer.max_epochs=-1"])) is None


@pytest.mark.parametrize("override", GOOD)
def test_values_at_the_ends_of_each_range_pass(override: str) -> None:
    assert check_command_line(CONF, "train", with_baseline(override.split())) is None


def test_serve_knobs_are_checked_at_both_ends() -> None:
    problem = check_command_line(CONF, "serve", ["artifact=x", "port=70000"])
    assert problem == "port=70000 is invalid: expected an integer in [0, 65535]"
    assert check_command_line(CONF, "serve", ["artifact=x", "port=65535"]) is None
    problem = check_command_line(CONF, "serve", ["artifact=x", "workers=0"])
    assert problem == "workers=0 is invalid: expected an integer >= 1"


def test_a_multiruns_job_checks_the_table_before_it_prints(tmp_path: Path) -> None:
    """A value only the running job can resolve (`${hydra:job.num}`) is not checked before the
    launch: each job refuses its value in the same line before it prints or builds anything."""
    proc = call_script(
        "train.py", "-m", "seed=1", "cv.folds=${hydra:job.num}", "trainer.max_epochs=1",
        f"hydra.sweep.dir={tmp_path}/s",
    )  # fmt: skip
    assert proc.returncode != 0
    assert "cv.folds=0 is invalid: expected an integer >= 2" in proc.stderr, proc.stderr
    assert "Seed set" not in proc.stdout + proc.stderr  # refused before the run began
    assert "trainer:" not in proc.stdout  # and before the config print


# Through the script: a value of the table and a `_target_`'s argument in the default suite, the
# template's other knobs (each a subprocess; the in-process check above takes every case) slow.
SCRIPT_CASES = [
    CASES[0],
    CASES[5],
    *(pytest.param(*CASES[i], marks=pytest.mark.slow) for i in (3, 6, 9, 11)),
]


@pytest.mark.parametrize(("override", "expected"), SCRIPT_CASES)
def test_a_bad_value_stops_the_script_in_one_line_before_the_run(
    override: str, expected: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    proc = run_script("train.py", override, f"hydra.run.dir={run_dir}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {expected}"), proc.stderr
    assert not run_dir.exists()  # stopped before the run dir, the data and the model


@pytest.mark.parametrize("script", ["eval.py", "doctor.py"])
def test_eval_and_doctor_check_values_the_same_way(script: str, tmp_path: Path) -> None:
    args = ["ckpt_path=missing.ckpt"] if script == "eval.py" else []
    proc = run_script(script, *args, "data.batch_size=abc", f"hydra.run.dir={tmp_path}/r")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "data.batch_size='abc' is invalid" in proc.stderr, proc.stderr
