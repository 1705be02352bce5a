"""The doctor on manual optimization however it steps (tests/doctor/manual_forms.py): every
probe ends within its fixed count of batches, so the doctor finishes; a probe that cannot reach
the step it needs skips and says what it waited for; and none of these healthy forms fails.
Each form also trains under bare Lightning, so what the doctor is given is working code.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf, open_dict

from tests.doctor import manual_forms
from tests.doctor.reported._common import Digits
from tests.helpers.config import compose_config
from tests.helpers.doctor import QUICK_PROBES, run_cfg
from tests.helpers.trainers import quiet_trainer
from trainwell.doctor.checks import CHECKS
from trainwell.doctor.report.verdict import Check

FORMS = [form.__name__ for form in manual_forms.FORMS]


class Hang(BaseException):
    """A probe that never ends (a BaseException: the doctor reports Exceptions as verdicts)."""


@contextmanager
def watchdog(seconds: int) -> Iterator[None]:
    """Stop a doctor that hangs: a guard against a probe without a bound, not a speed limit
    (the runs here take a second or two, 15x less)."""

    def alarm(*_: object) -> None:
        raise Hang(f"the doctor was still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def doctor(tmp_path: Path, form: str, ids: list[str] | None) -> dict[str, Check]:
    cfg = compose_config(QUICK_PROBES, tmp_path / "run", config_name="doctor")
    with open_dict(cfg):
        cfg.model = OmegaConf.create({"_target_": f"{manual_forms.__name__}.{form}"})
        cfg.data = OmegaConf.create({"_target_": "tests.doctor.reported._common.Digits"})
    with watchdog(30):
        return run_cfg(cfg, tmp_path / "probes", ids)


def test_a_resumed_step_the_probe_cannot_reach_is_named_and_never_waited_for(
    tmp_path: Path,
) -> None:
    """Accumulating 16 micro-batches: the roundtrip's resumed fit watches 8 and the manual
    accumulation probe watches 8; neither waits longer, each says what it waited for."""
    ids = ["checkpoint.roundtrip", "accumulation.equivalence"]
    checks = doctor(tmp_path, "EverySixteenBatches", ids)
    roundtrip, accumulation = (checks[i] for i in ids)
    assert roundtrip.status == "pass", roundtrip.message
    assert "the next training step was not compared: no optimizer step in the 8 micro-batches" in (
        roundtrip.message
    )
    assert accumulation.status == "skip"
    assert "no optimizer.step() in the first 8 micro-batches" in accumulation.message


def test_a_fit_that_takes_no_step_skips_the_checks_that_need_one(tmp_path: Path) -> None:
    """Full-batch gradient descent steps on an epoch's last batch, which the one-batch fit
    never reaches: its readers skip, naming the missing step (no `flat loss` fail)."""
    ids = ["grad.flow", "grad.zeroing", "overfit.one_batch"]
    checks = doctor(tmp_path, "StepsAtEpochEnd", ids)
    for check_id in ids:
        assert checks[check_id].status == "skip", checks[check_id].message
        assert "no optimizer step in the" in checks[check_id].message


def test_the_one_batch_fit_counts_the_optimizer_steps_of_a_task_that_accumulates(
    tmp_path: Path,
) -> None:
    """Stepping every 16 micro-batches: judged on as many optimizer steps as a task stepping
    every micro-batch, not on a sixteenth of them (where its loss has not moved yet)."""
    check = doctor(tmp_path, "EverySixteenBatches", ["overfit.one_batch"])["overfit.one_batch"]
    assert check.status == "pass", check.message


@pytest.mark.parametrize("form", ["TwoOptimizersTakingTurns", "StepsOnSampleCount"])
def test_a_window_is_read_from_its_own_zero_grad_and_a_sum_over_its_items_is_a_mean(
    tmp_path: Path, form: str
) -> None:
    """Optimizers taking turns: each one's window starts at its own zero_grad, from the weights
    the other's step left. A sum divided by the window's samples: the mean over them."""
    check = doctor(tmp_path, form, ["accumulation.equivalence"])["accumulation.equivalence"]
    assert check.status == "pass", check.message


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
def test_the_doctor_finishes_on_each_manual_form_and_fails_none(tmp_path: Path, form: str) -> None:
    checks = doctor(tmp_path, form, None)
    assert list(checks) == list(CHECKS)
    assert [f"{c.id}: {c.message}" for c in checks.values() if c.status in ("fail", "warn")] == []


@pytest.mark.parametrize("form", FORMS)
def test_each_form_trains_under_bare_lightning(form: str) -> None:
    module = getattr(manual_forms, form)()
    before = [p.detach().clone() for p in module.parameters()]
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(module, datamodule=Digits())
    assert trainer.global_step > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))
