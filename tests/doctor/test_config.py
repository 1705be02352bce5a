"""conf/doctor.yaml and the doctor=true preflight: compose, inherit, refuse on a fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.config import compose_config
from tests.helpers.doctor import MUSEUM, QUICK_PROBES
from trainwell.cli import train_job
from trainwell.doctor.harness.settings import ProbeSettings
from trainwell.doctor.run import diagnose
from trainwell.errors import TrainwellError


@pytest.mark.example("project.data.cifar10", "project.data.synthetic", "project.models.resnet")
def test_doctor_config_inherits_train_overrides(tmp_path: Path) -> None:
    cfg = compose_config(
        ["experiment=resnet_accum", "data=synthetic", "probe.overfit_steps=5"],
        tmp_path,
        config_name="doctor",
    )
    assert cfg.trainer.accumulate_grad_batches == 4
    assert cfg.data._target_.endswith("SyntheticDataModule")
    settings = ProbeSettings.from_cfg(cfg.probe)
    assert settings.overfit_steps == 5
    # conf/doctor.yaml lists every knob with the dataclass default (train.py doctor=true uses those)
    assert ProbeSettings.from_cfg({k: v for k, v in cfg.probe.items() if k != "overfit_steps"}) == (
        ProbeSettings()
    )


def test_unknown_probe_setting_is_a_usage_error() -> None:
    with pytest.raises(TrainwellError, match=r"probe\.bogus"):
        ProbeSettings.from_cfg({"bogus": 1})


def test_preflight_refuses_to_train_on_a_fail(tmp_path: Path) -> None:
    cfg = compose_config(
        [
            "doctor=true",
            f"model.net._target_={MUSEUM}.SoftmaxNet",
            "model.net.width=8",
            "+probe.overfit_steps=12",  # the doctor's quick probes: the refusal is the same
            "+probe.memory_steps=4",
        ],
        tmp_path / "run",
    )
    with pytest.raises(TrainwellError, match=r"loss\.logits"):
        train_job(cfg)
    assert (tmp_path / "run" / "doctor" / "report.json").is_file()
    assert not (tmp_path / "run" / "checkpoints").exists()  # no training step was spent


@pytest.mark.slow
def test_preflight_pass_links_the_report_in_results(tmp_path: Path) -> None:
    cfg = compose_config(
        [
            "doctor=true",
            "trainer.max_epochs=1",
            "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=1",
            "test=false",
        ],
        tmp_path / "run",
    )
    train_job(cfg)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["doctor_report"] == str(tmp_path / "run" / "doctor" / "report.json")


def test_the_doctor_refuses_a_monitored_metric_validation_never_logs_as_train_does(
    tmp_path: Path,
) -> None:
    """A module that logs `val_loss` under the default monitor.metric=val/acc: train.py stops at
    its first validation with one line; the doctor must not call the same command ready."""
    plain = ["~model", "+model._target_=tests.doctor.reported._common.Classifier", "test=false"]
    plain += [
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
    ]
    with pytest.raises(TrainwellError) as trained:
        train_job(compose_config(plain, tmp_path / "train"))
    cfg = compose_config([*plain, *QUICK_PROBES], tmp_path / "doctor", config_name="doctor")
    with pytest.raises(TrainwellError) as doctored:
        diagnose(cfg)
    assert "logs no val/acc in validation" in str(doctored.value)
    assert str(doctored.value) == str(trained.value)
