"""The training plan's arithmetic, LR scaling, and the plan a real run prints and stores."""

from __future__ import annotations

import json
import math
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

from tests.helpers.scripts import call_script
from tests.helpers.trainers import quiet_trainer
from trainwell.loading.samplers import WeightedEpochDraw
from trainwell.training.lr_scaling import scale_lr
from trainwell.training.plan import make_plan
from trainwell.training.plan_callback import plan_for


def test_plan_for_ten_thousand_samples_batch_32_accumulate_4() -> None:
    plan = make_plan(dataset_size=10_000, micro_batch=32, accumulate=4, max_epochs=3)
    assert plan.effective_batch == 128
    assert plan.iterations_per_epoch == 313  # ceil(10000 / 32)
    assert plan.last_batch_size == 16  # 10000 - 312 * 32
    assert plan.optimizer_steps_per_epoch == 79  # ceil(313 / 4): the tail window steps too
    assert plan.last_window_batches == 1
    assert plan.total_optimizer_steps == 237
    assert plan.examples_seen == 30_000


def test_plan_world_size_drop_last_and_max_steps() -> None:
    plan = make_plan(dataset_size=1000, micro_batch=64, accumulate=2, world_size=3, max_epochs=10)
    # 16 batches (the last of 40) dealt to 3 ranks: 6 rounds, 2 ranks pad the last one
    assert plan.global_batches_per_epoch == 16
    assert (plan.iterations_per_epoch, plan.padding_batches_per_epoch) == (6, 2)
    assert plan.effective_batch == 384
    assert plan.items_per_epoch == 1000  # every sample once, none twice
    assert plan.optimizer_steps_per_epoch == 3
    assert plan.last_step_items == 1000 - 2 * 384
    dropped = make_plan(1000, 64, drop_last=True, max_epochs=1)
    assert (dropped.iterations_per_epoch, dropped.last_batch_size) == (15, 64)
    capped = make_plan(1000, 64, accumulate=2, max_epochs=10, max_steps=5)
    assert capped.total_optimizer_steps == 5
    assert capped.examples_seen == 5 * 128


def test_plan_follows_limit_and_overfit_batches() -> None:
    assert make_plan(1000, 10, max_epochs=2, limit_batches=1).optimizer_steps_per_epoch == 1
    assert make_plan(1000, 10, max_epochs=1, limit_batches=0.25).iterations_per_epoch == 25


def test_plan_needs_an_end() -> None:
    with pytest.raises(ValueError, match=r"max_epochs or trainer\.max_steps"):
        make_plan(100, 10, max_epochs=-1, max_steps=-1)


@pytest.mark.parametrize(
    ("rule", "expected"), [("linear", 0.4), ("sqrt", 0.1 * math.sqrt(4)), ("none", 0.1)]
)
def test_lr_scaling_rules(rule: str, expected: float) -> None:
    assert scale_lr(0.1, rule, effective_batch=1024, reference_batch=256) == pytest.approx(expected)


@pytest.mark.example("project.data.cifar10", "project.data.synthetic", "project.models.resnet")
def test_run_prints_and_stores_the_plan_and_warns_about_bn(tmp_path: Path) -> None:
    proc = call_script(
        "train.py",
        "experiment=resnet_accum",
        "data=synthetic",
        "data.num_samples=40",
        "data.num_val=8",
        "data.num_test=8",
        "data.batch_size=8",
        "data.num_workers=0",
        "model.net.width=4",
        "trainer.max_epochs=1",
        "trainer.accelerator=cpu",
        "trainer.num_sanity_val_steps=0",
        "test=false",
        "print_config=false",
        f"hydra.run.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "micro-batch 8 x accumulate 4 x world 1 = effective batch 32" in proc.stdout
    assert "optimizer steps/epoch: 2 (last window: 1 micro-batches, 8 samples)" in proc.stdout
    assert "lr: 0.0125 = 0.1 at batch 256 scaled linear to 32" in proc.stdout
    assert "BatchNorm normalises over 8 samples, not 32" in proc.stderr, proc.stderr[-2000:]
    plan = json.loads((tmp_path / "results.json").read_text())["plan"]
    assert plan["effective_batch"] == 32
    assert plan["total_optimizer_steps"] == 2
    assert plan["lr"] == pytest.approx(0.0125)


def test_max_steps_beyond_what_the_epochs_allow_ends_with_the_epochs() -> None:
    # 100 samples, batch 8: 13 micro-batches, K=3 -> 5 steps per epoch (the tail window of 1
    # steps too); 2 epochs end training at step 10 long before max_steps=50.
    plan = make_plan(100, 8, accumulate=3, max_epochs=2, max_steps=50)
    assert plan.total_optimizer_steps == 10
    assert plan.epochs == 2.0
    assert plan.examples_seen == 200
    # ... which is what a real Trainer runs with those limits
    module = _Line()
    trainer = quiet_trainer(max_epochs=2, max_steps=50, accumulate_grad_batches=3)
    data = TensorDataset(torch.randn(100, 2), torch.randn(100, 1))
    trainer.fit(module, DataLoader(data, batch_size=8))
    assert trainer.global_step == plan.total_optimizer_steps


def test_a_fractional_limit_rounds_down_like_lightning() -> None:
    assert make_plan(1000, 10, max_epochs=1, limit_batches=0.333).iterations_per_epoch == 33


class _Line(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_the_plan_says_when_an_epoch_draws_with_replacement() -> None:
    """A weighted sampler (the user's own, or the template's data.sampler=weighted) draws with
    replacement: the plan must not promise each sample once per epoch."""
    data = TensorDataset(torch.arange(20.0))
    weighted = WeightedRandomSampler(torch.ones(20), num_samples=20)
    template = WeightedEpochDraw(torch.ones(20), None, seed=0)
    for sampler, repeats in ((None, False), (weighted, True), (template, True)):
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        line = plan_for(loader, quiet_trainer(max_epochs=1)).lines()[0]
        assert ("each sample once per epoch" in line) is not repeats, line
        assert ("drawn with replacement" in line) is repeats, line
    # drop_last: the last partial batch's samples sit the epoch out.
    loader = DataLoader(data, batch_size=8, shuffle=True, drop_last=True)
    line = plan_for(loader, quiet_trainer(max_epochs=1)).lines()[0]
    assert "each sample at most once per epoch (drop_last leaves 4 out)" in line, line
