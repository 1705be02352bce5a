"""The Lightning reflex `Task.load_from_checkpoint(path)` returns what load_trained returns."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from project.tasks.classification import ClassificationTask
from trainwell.deploy import load_trained
from trainwell.errors import TrainwellError

pytestmark = pytest.mark.example("project.tasks.classification")


def test_load_from_checkpoint_is_load_trained_in_eval_mode(digits_run: Path) -> None:
    ckpt = digits_run / "checkpoints" / "best.ckpt"
    module = ClassificationTask.load_from_checkpoint(ckpt)
    assert isinstance(module, ClassificationTask) and not module.training
    assert not any(m.training for m in module.modules())
    expected = load_trained(ckpt).state_dict()
    got = module.state_dict()
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    with pytest.raises(TrainwellError, match="takes no lr"):
        ClassificationTask.load_from_checkpoint(ckpt, lr=0.1)


@pytest.mark.example("project.tasks.language_model")
def test_another_tasks_load_from_checkpoint_is_refused_naming_both(digits_run: Path) -> None:
    from project.tasks.language_model import LanguageModelTask

    with pytest.raises(
        TrainwellError, match=r"holds a ClassificationTask, not a LanguageModelTask"
    ):
        LanguageModelTask.load_from_checkpoint(digits_run / "checkpoints" / "best.ckpt")
