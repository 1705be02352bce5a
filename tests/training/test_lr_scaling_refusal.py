"""An LR scaling rule with no configured LR to scale is refused, by train.py and by the doctor.

Without the refusal the run would silently train at whatever LR the module picks, while the
printed plan claims a scaled one. The refusal lives in `planner_settings`; both entry points
must reach it before anything trains or a report is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.config import compose_config
from tests.helpers.doctor import FAST
from trainwell.doctor.run import diagnose
from trainwell.errors import TrainwellError
from trainwell.training.plan_callback import planner_settings
from trainwell.training.run import train

NO_LR = ["model.optimizer=null"]  # a model config without an optimizer `_partial_`
# Kept short in case the refusal is ever lost and the run starts.
SHORT_RUN = ["print_config=false", "trainer.max_steps=1", "test=false"]
RULES = ["linear", "sqrt"]


def assert_refusal(err: pytest.ExceptionInfo[TrainwellError], rule: str) -> None:
    message = str(err.value)
    assert "\n" not in message
    assert f"lr_scaling.rule={rule}" in message
    assert "model.optimizer.lr" in message


@pytest.mark.parametrize("rule", RULES)
def test_planner_settings_refuses_a_rule_without_an_lr(rule: str, tmp_path: Path) -> None:
    cfg = compose_config([*NO_LR, f"lr_scaling.rule={rule}"], tmp_path / "run")
    with pytest.raises(TrainwellError) as err:
        planner_settings(cfg)
    assert_refusal(err, rule)


def test_planner_settings_accepts_no_rule_without_an_lr_and_a_rule_with_one(
    tmp_path: Path,
) -> None:
    # The refusal is for the one combination that cannot work, not for either part alone.
    unscaled = planner_settings(compose_config([*NO_LR, "lr_scaling.rule=none"], tmp_path / "a"))
    assert unscaled["base_lr"] is None and unscaled["lr_scaling"]["rule"] == "none"
    cfg = compose_config(["lr_scaling.rule=linear"], tmp_path / "b")
    scaled = planner_settings(cfg)
    assert scaled["base_lr"] == cfg.model.optimizer.lr and scaled["lr_scaling"]["rule"] == "linear"


@pytest.mark.parametrize("rule", RULES)
def test_train_refuses_a_rule_without_an_lr(rule: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cfg = compose_config([*NO_LR, f"lr_scaling.rule={rule}", *SHORT_RUN], run_dir)
    with pytest.raises(TrainwellError) as err:
        train(cfg)
    assert_refusal(err, rule)
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "results.json").exists()


@pytest.mark.parametrize("rule", RULES)
def test_doctor_refuses_a_rule_without_an_lr(rule: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cfg = compose_config([*NO_LR, f"lr_scaling.rule={rule}", *FAST], run_dir, "doctor")
    with pytest.raises(TrainwellError) as err:
        diagnose(cfg)
    assert_refusal(err, rule)
    assert not (run_dir / "doctor" / "report.json").exists()
    assert not (run_dir / "doctor" / ".probes").exists()  # no scratch left behind
