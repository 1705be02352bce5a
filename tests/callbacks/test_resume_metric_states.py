"""ExactResume restores each torchmetrics metric's states by name; a checkpoint whose metric of
that name has other states (another metric class, written by older code) is named in a warning
and left out, never half-loaded."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torchmetrics.classification import MulticlassAccuracy

from tests.helpers.trainers import quiet_trainer
from trainwell.blocks.metrics import MicroAccuracy
from trainwell.callbacks.training_state import ExactResume
from trainwell.compat import metric_states

pytestmark = pytest.mark.engine  # needs nothing of the examples


class Scored(L.LightningModule):
    def __init__(self, metric: torch.nn.Module) -> None:
        super().__init__()
        self.train_acc = metric


def _resumed(saved_metric: torch.nn.Module, metric: torch.nn.Module) -> ExactResume:
    preds, target = torch.tensor([1, 2, 3, 3]), torch.tensor([1, 2, 0, 3])
    saved_metric.update(preds, target)
    callback = ExactResume()
    callback.setup(quiet_trainer(), Scored(metric), "fit")
    callback.load_state_dict({"metrics": {"train_acc": metric_states(saved_metric)}})
    return callback


def test_a_metric_with_the_same_states_is_restored() -> None:
    metric = MicroAccuracy()
    _resumed(MicroAccuracy(), metric)
    assert (int(metric.correct), int(metric.total)) == (3, 4)
    assert float(metric.compute()) == 0.75


def test_a_metric_with_other_states_is_named_and_left_out() -> None:
    metric = MicroAccuracy()
    with pytest.warns(UserWarning, match=r"train_acc is a MicroAccuracy whose states"):
        _resumed(MulticlassAccuracy(4, average="micro"), metric)
    assert (int(metric.correct), int(metric.total)) == (0, 0)
    assert not hasattr(metric, "tp")
