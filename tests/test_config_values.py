"""A wrong type or an out-of-range value for a config key: one line naming the key, the value and
what is expected, exit 2, before any data loads (through the real scripts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.config import CONF
from tests.helpers.scripts import run_script
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
]


def test_a_serve_knob_outside_its_choices_is_one_line_before_any_import() -> None:
    problem = check_command_line(CONF, "serve", ["artifact=x", "ort_spin=sometimes"])
    assert problem == "ort_spin='sometimes' is invalid: expected one of always, run, never"
    assert check_command_line(CONF, "serve", ["artifact=x", "ort_spin=run"]) is None


def test_a_summary_mode_outside_min_max_is_one_line_before_any_run() -> None:
    problem = check_command_line(CONF, "train", ["summary.mode=maximize"])
    assert problem == "summary.mode='maximize' is invalid: expected one of min, max, null"
    assert check_command_line(CONF, "train", ["summary.mode=min"]) is None


@pytest.mark.parametrize(("override", "expected"), CASES)
def test_the_command_line_check_names_key_value_and_expectation(
    override: str, expected: str
) -> None:
    problem = check_command_line(CONF, "train", [override])
    assert problem is not None and problem.startswith(expected), problem


def test_good_values_and_a_users_unannotated_arguments_pass() -> None:
    assert check_command_line(CONF, "train", ["data.batch_size=8", "model.optimizer.lr=1"]) is None
    assert check_command_line(CONF, "train", ["trainer.max_epochs=-1"]) is None


@pytest.mark.parametrize(("override", "expected"), [CASES[0], CASES[3], CASES[5]])
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
