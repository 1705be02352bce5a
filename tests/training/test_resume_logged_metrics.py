"""A run resumed after its last training step trains and logs nothing new: its results must still
hold the metrics the fit logged, restored from the checkpoint (ExactResume)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.config import OWNED, QUIET_RUN, compose_config
from tests.helpers.scripted import scripted_cfg
from trainwell.training.run import train


def test_a_resume_after_the_last_step_reports_the_metrics_the_fit_logged(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = train(scripted_cfg(run_dir, "trainer.max_epochs=2"))
    assert first["metrics"]["val/acc"] == pytest.approx(0.9)  # epoch 1's scripted value
    # killed after last.ckpt reached the disk, before results.json did
    (run_dir / "results.json").unlink()
    again = train(scripted_cfg(run_dir, "trainer.max_epochs=2", "resume=auto"))
    assert again["finished_at"] == first["finished_at"]
    assert again["metrics"] == first["metrics"]
    assert again["metrics_last"] == first["metrics_last"]  # the fit's last logged values


def test_the_training_metrics_a_fit_logged_come_back_with_it(tmp_path: Path) -> None:
    # val/* come from the validations the checkpoint records; train/* only from what the fit
    # logged, which the checkpoint carries (ExactResume) since nothing is logged again.
    run_dir = tmp_path / "run"
    run = [*OWNED, *QUIET_RUN, "trainer.max_epochs=1", "test=false", "logger=[]"]
    first = train(compose_config(run, run_dir))
    assert any(name.startswith("train/") for name in first["metrics"]), first["metrics"]
    (run_dir / "results.json").unlink()
    again = train(compose_config([*run, "resume=auto"], run_dir))
    assert again["metrics"] == first["metrics"]
