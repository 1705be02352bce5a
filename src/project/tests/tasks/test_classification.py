from functools import partial

import pytest
import torch

from project.data.digits import DigitsDataModule
from project.models.digits_cnn import DigitsCNN
from project.tasks.classification import ClassificationTask
from tests.helpers.trainers import quiet_trainer
from trainwell.blocks.schedules import warmup_cosine

pytestmark = pytest.mark.example(
    "project.data.digits",
    "project.models.digits_cnn",
    "project.tasks.classification",
)


def make_task() -> ClassificationTask:
    torch.manual_seed(0)
    return ClassificationTask(
        net=DigitsCNN(),
        optimizer=partial(torch.optim.SGD, lr=0.1),
        scheduler=partial(warmup_cosine, warmup_fraction=0.5),
        label_smoothing=0.1,
    )


def test_one_training_batch_through_a_real_trainer(tmp_path) -> None:
    task = make_task()
    before = {k: v.clone() for k, v in task.state_dict().items()}
    dm = DigitsDataModule(batch_size=16, seed=0)
    trainer = quiet_trainer(
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=1,
        default_root_dir=tmp_path,
    )
    trainer.fit(task, datamodule=dm)
    metrics = trainer.callback_metrics
    assert {"train/loss", "train/acc", "val/loss", "val/acc", "val/acc_best"} <= set(metrics)
    assert torch.isfinite(metrics["train/loss"])
    assert metrics["val/acc_best"] == metrics["val/acc"]  # one real validation epoch
    changed = [k for k, v in task.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.endswith("weight") for k in changed)
    # The scheduler is stepped per optimizer step and knows the run's total optimizer steps.
    scheduler = trainer.lr_scheduler_configs[0]
    assert scheduler.interval == "step"
    assert scheduler.scheduler.lr_lambdas[0].total_steps == 1


def test_hparams_hold_plain_values_only() -> None:
    task = make_task()
    assert set(task.hparams) == {"num_classes", "label_smoothing", "compile", "loss"}
    assert task.criterion.label_smoothing == 0.1


def test_eval_step_does_not_update_batchnorm_statistics() -> None:
    """Lightning runs validation in eval mode: BN running stats must stay untouched by val batches."""
    task = make_task()
    dm = DigitsDataModule(batch_size=32, seed=0)
    trainer = quiet_trainer(limit_val_batches=1.0)
    stats = task.net.features[1].running_mean.clone()
    trainer.validate(task, datamodule=dm)
    assert trainer.num_val_batches == [6]  # 180 val samples in batches of 32 really ran
    assert torch.equal(task.net.features[1].running_mean, stats)
