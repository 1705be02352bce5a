"""The Lightning reflex `Task.load_from_checkpoint(path)` gets one line naming the way on."""

from __future__ import annotations

import pytest

from trainwell.errors import TrainwellError
from trainwell.tasks import ClassificationTask, LanguageModelTask


@pytest.mark.parametrize("task", [ClassificationTask, LanguageModelTask])
def test_load_from_checkpoint_names_load_trained(task: type) -> None:
    with pytest.raises(TrainwellError) as err:
        task.load_from_checkpoint("run/checkpoints/best.ckpt")
    message = str(err.value)
    assert "\n" not in message
    assert 'use trainwell.deploy.load_trained("run/checkpoints/best.ckpt")' in message
    assert message.startswith(f"{task.__name__}.load_from_checkpoint")
