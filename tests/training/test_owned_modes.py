"""Eval mode on the engine tests' own modules: validation and test run with every module in eval
mode and autograd off (test under inference mode; Lightning's validation inside fit uses no_grad),
and training re-enters train mode, autograd on, after each validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.config import OWNED, QUIET_RUN, compose_config
from tests.owned.bugs import ModeRecorder
from trainwell.training.run import train

pytestmark = pytest.mark.engine


def test_validation_and_test_run_in_eval_and_inference_mode_training_in_train_mode(
    tmp_path: Path,
) -> None:
    ModeRecorder.seen.clear()
    overrides = [
        *OWNED,
        *QUIET_RUN,
        "model._target_=tests.owned.bugs.ModeRecorder",
        "model.net.dropout=0.5",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=3",
        "trainer.limit_val_batches=2",
        "trainer.limit_test_batches=2",
    ]
    train(compose_config(overrides, tmp_path / "run"))
    stages = [stage for stage, *_ in ModeRecorder.seen]
    # epoch 0, its validation, epoch 1 (after a validation), its validation, then the test
    assert stages == ["train"] * 3 + ["val"] * 2 + ["train"] * 3 + ["val"] * 2 + ["test"] * 2
    for stage, modes, grad, inference in ModeRecorder.seen:
        if stage == "train":
            assert (modes, grad, inference) == (frozenset({True}), True, False), stage
        else:
            assert (modes, grad) == (frozenset({False}), False), stage
            assert inference == (stage == "test"), stage
