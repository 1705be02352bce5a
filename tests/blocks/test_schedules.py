"""The LR schedule steps once per optimizer step and ends where the training plan says."""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch
from torch import nn

from project.tasks.classification import ClassificationTask
from tests.helpers.trainers import template_trainer, templated
from trainwell.blocks.schedules import WarmupCosine, warmup_cosine, warmup_steps_for
from trainwell.training.plan import make_plan

pytestmark = pytest.mark.example("project.tasks.classification")


class LrTrace(L.Callback):
    """The LR each optimizer step uses, and how many micro-batches ran."""

    def __init__(self) -> None:
        self.lrs: list[float] = []
        self.micro_batches = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.micro_batches += 1

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.lrs.append(optimizer.param_groups[0]["lr"])


@pytest.mark.example("project.data.synthetic")
def test_scheduler_advances_once_per_optimizer_step_and_ends_on_plan() -> None:
    from project.data.synthetic import SyntheticDataModule

    # 40 samples, batch 8, K=4, 3 epochs: 5 micro-batches and 2 optimizer steps per epoch.
    plan = make_plan(dataset_size=40, micro_batch=8, accumulate=4, max_epochs=3)
    assert (plan.iterations_per_epoch, plan.optimizer_steps_per_epoch) == (5, 2)
    assert plan.total_optimizer_steps == 6
    data = SyntheticDataModule(num_samples=40, num_val=8, num_test=8, batch_size=8, seed=0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
    scheduler = partial(warmup_cosine, warmup_steps=2, min_lr_ratio=0.1)
    task = ClassificationTask(net, partial(torch.optim.SGD, lr=1.0), scheduler)
    trace = LrTrace()
    trainer = template_trainer(max_epochs=3, accumulate_grad_batches=4, callbacks=[trace])
    trainer.fit(task, datamodule=templated(data))
    multiplier = WarmupCosine(plan.total_optimizer_steps, warmup_steps=2, min_ratio=0.1)
    assert trace.micro_batches == 15
    assert trace.lrs == pytest.approx([multiplier(i) for i in range(6)])
    lr_scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert lr_scheduler.last_epoch == plan.total_optimizer_steps
    # After the last planned step the schedule sits at its floor: the plan and schedule agree.
    assert lr_scheduler.get_last_lr()[0] == pytest.approx(0.1)


def test_warmup_steps_explicit_wins_and_is_clamped() -> None:
    assert warmup_steps_for(100, warmup_fraction=0.05) == 5
    assert warmup_steps_for(100, warmup_fraction=0.05, warmup_steps=7) == 7
    assert warmup_steps_for(3, warmup_steps=10) == 3


def test_warmup_cosine_shape() -> None:
    f = WarmupCosine(total_steps=10, warmup_steps=4, min_ratio=0.0)
    assert [f(i) for i in range(4)] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert f(4) == pytest.approx(1.0)
    assert f(10) == pytest.approx(0.0)
    assert f(7) == pytest.approx(0.5)
