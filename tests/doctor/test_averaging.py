"""weights.averaging beyond the museum's two exhibits: their twin, the template's and Lightning's
own EMA pass; an average the module keeps finds the same verdicts; statistics updated every
micro-batch (not averages of the weights) are left alone; an average kept outside the
state_dict warns; no average at all is a skip with its reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from project.tasks.classification import ClassificationTask
from tests.doctor.museum import StepEMA
from tests.helpers.doctor import FAST, MUSEUM, run_ids

pytestmark = pytest.mark.example("project.tasks.classification")

ID = "weights.averaging"
HERE = "tests.doctor.test_averaging"
CALLBACK = "+callbacks.averaging._target_="


def _check(tmp_path: Path, *overrides: str) -> Any:
    return run_ids(tmp_path, [*FAST, *overrides], [ID])[ID]


class AveragedModelTask(ClassificationTask):
    """Keeps `AveragedModel(self.net)` and updates it in its own on_train_batch_end: once per
    micro-batch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ema = AveragedModel(self.net, multi_avg_fn=get_ema_multi_avg_fn(0.9))
        self.ema.requires_grad_(False)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.ema.update_parameters(self.net)


class SteppedAveragedModelTask(AveragedModelTask):
    """The twin: updates only when an optimizer step happened."""

    _step = 0

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.global_step != self._step:
            self._step = self.trainer.global_step
            self.ema.update_parameters(self.net)


class RunningFeatureMeanTask(ClassificationTask):
    """Keeps an EMA of the batch's input means in a parameter outside the optimizer (a codebook
    or a normaliser does this), updated at every micro-batch: a statistic, not an average of
    the weights, though shaped like one (the first conv's bias has 8 entries too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.feature_mean = nn.Parameter(torch.zeros(8), requires_grad=False)

    def configure_optimizers(self) -> Any:
        trainable = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.SGD(trainable, lr=0.1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        with torch.no_grad():
            rows = x.flatten(1)[:, :8].mean(0)
            self.feature_mean.lerp_(rows, 0.1)
        return super().training_step(batch, batch_idx)


class CallbackStateEMA(StepEMA):
    """Saves its average only as its own callback state: the state_dict keeps the weights."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"average": self.average}


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(
            [f"{CALLBACK}{MUSEUM}.StepEMA", "trainer.accumulate_grad_batches=2"], id="twin"
        ),
        pytest.param(["ema.decay=0.9", "trainer.accumulate_grad_batches=3"], id="ema.decay"),
        pytest.param(
            [
                f"{CALLBACK}lightning.pytorch.callbacks.EMAWeightAveraging",
                "+callbacks.averaging.decay=0.9",
            ],
            id="lightning",
        ),
        pytest.param([f"model._target_={HERE}.SteppedAveragedModelTask"], id="module-twin"),
    ],
)
def test_an_average_updated_per_optimizer_step_and_saved_passes(
    tmp_path: Path, overrides: list[str]
) -> None:
    check = _check(tmp_path, *overrides)
    assert check.status == "pass", check.message
    assert check.evidence["optimizer_steps_watched"] >= 3
    for average in check.evidence["averages"].values():
        assert (
            average["updates_mid_window"] == 0 and average["updates_after_an_optimizer_step"] >= 3
        )


def test_an_average_the_module_updates_per_micro_batch_fails(tmp_path: Path) -> None:
    check = _check(tmp_path, f"model._target_={HERE}.AveragedModelTask")
    assert check.status == "fail", check.message
    assert check.message.startswith("module updates its weight average after micro-batches")
    averaged = {a["averages"] for a in check.evidence["averages"].values()}
    assert averaged and all(name.startswith("net.") for name in averaged), averaged


def test_a_statistic_updated_every_micro_batch_is_no_average(tmp_path: Path) -> None:
    check = _check(tmp_path, f"model._target_={HERE}.RunningFeatureMeanTask")
    assert check.status == "skip", check.message
    assert "no moving average of the weights found" in check.message


def test_an_average_kept_outside_the_state_dict_warns(tmp_path: Path) -> None:
    check = _check(tmp_path, f"{CALLBACK}{HERE}.CallbackStateEMA")
    assert check.status == "warn", check.message
    assert check.evidence["kept_in"] == {"CallbackStateEMA": ["callbacks"]}


def test_no_average_is_a_skip_with_its_reason(tmp_path: Path) -> None:
    check = _check(tmp_path)
    assert check.status == "skip"
    assert "ema.decay is null" in check.message
