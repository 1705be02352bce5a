"""Exact accumulation: each optimizer step follows the mean loss over every sample of its window.

Real Lightning Trainer runs, fp32 on CPU, a BatchNorm-free net and SGD without momentum, so one
step's update is lr x gradient and equal gradients mean equal weights.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from torch import nn

from tests.conftest import quiet_trainer
from trainwell.data import SyntheticDataModule
from trainwell.tasks import ClassificationTask
from trainwell.training.accumulation import EpochBatches, batchnorm_warning, micro_batch_sizes

LR = 0.5


def _net() -> nn.Module:
    torch.manual_seed(0)  # every run starts from the same weights
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 16), nn.Tanh(), nn.Linear(16, 10))


class MeanLossTask(ClassificationTask):
    """What plain Lightning does: return the micro-batch mean and let Lightning divide by K."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        loss, _, _ = self._shared_step(batch)
        return loss


def _train(
    num_samples: int,
    batch_size: int,
    accumulate: int,
    task_cls: type[ClassificationTask] = ClassificationTask,
    **trainer_kwargs,
) -> dict[str, torch.Tensor]:
    data = SyntheticDataModule(
        num_samples=num_samples, num_val=8, num_test=8, batch_size=batch_size, seed=3
    )
    task = task_cls(net=_net(), optimizer=partial(torch.optim.SGD, lr=LR, momentum=0.0))
    trainer = quiet_trainer(
        precision="32-true",
        accumulate_grad_batches=accumulate,
        deterministic=True,
        **trainer_kwargs,
    )
    trainer.fit(task, datamodule=data)
    return {k: v.detach().clone() for k, v in task.net.state_dict().items()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_four_micro_batches_of_8_equal_one_batch_of_32() -> None:
    accumulated = _train(num_samples=64, batch_size=8, accumulate=4, max_steps=1)
    full = _train(num_samples=64, batch_size=32, accumulate=1, max_steps=1)
    initial = _net().state_dict()
    assert (
        _max_diff(full, initial) > 1e-3
    )  # the step moved the weights: the comparison means something
    assert _max_diff(accumulated, full) <= 1e-6


def test_short_tail_window_is_the_mean_over_its_own_samples() -> None:
    # 40 samples, batch 8, K=4: windows hold micro-batches [0..3] (32 samples) and [4] (8 samples).
    # Batch 32 without accumulation steps on exactly the same samples: 32, then the last 8.
    accumulated = _train(num_samples=40, batch_size=8, accumulate=4, max_epochs=1)
    full = _train(num_samples=40, batch_size=32, accumulate=1, max_epochs=1)
    assert _max_diff(accumulated, full) <= 1e-6
    # Plain Lightning divides the 1-micro-batch tail by 4 (upstream #19987): a visibly wrong step.
    plain = _train(num_samples=40, batch_size=8, accumulate=4, task_cls=MeanLossTask, max_epochs=1)
    assert _max_diff(plain, full) > 1e-4


def test_uneven_micro_batches_in_one_window_weigh_each_sample_once() -> None:
    # 36 samples, batch 8, K=5: one window of 8+8+8+8+4; a mean of micro-batch means would give
    # each of the last 4 samples twice the weight of the others.
    accumulated = _train(num_samples=36, batch_size=8, accumulate=5, max_epochs=1)
    full = _train(num_samples=36, batch_size=36, accumulate=1, max_epochs=1)
    assert _max_diff(accumulated, full) <= 1e-6
    plain = _train(num_samples=36, batch_size=8, accumulate=5, task_cls=MeanLossTask, max_epochs=1)
    assert _max_diff(plain, full) > 1e-5


def test_window_arithmetic_and_loss_scale() -> None:
    sizes = micro_batch_sizes(samples=40, batch_size=8, drop_last=False)
    assert sizes == (8, 8, 8, 8, 8)
    batches = EpochBatches(sizes=sizes, world_size=2)
    assert list(batches.window(4, accumulate=4)) == [4]
    assert batches.window_samples(1, accumulate=4) == 64  # 4 micro-batches x 8 x 2 ranks
    assert batches.window_samples(4, accumulate=4) == 16
    # Lightning divides by K=4 and DDP by 2 ranks: 4 * 2 / 16 undoes both for the tail window.
    assert batches.loss_scale(4, accumulate=4) == pytest.approx(0.5)
    assert micro_batch_sizes(samples=37, batch_size=8, drop_last=False) == (8, 8, 8, 8, 5)
    assert micro_batch_sizes(samples=37, batch_size=8, drop_last=True) == (8, 8, 8, 8)
    assert micro_batch_sizes(samples=37, batch_size=8, drop_last=False, num_batches=2) == (8, 8)


def test_train_loss_is_logged_as_the_true_mean() -> None:
    data = SyntheticDataModule(num_samples=40, num_val=8, num_test=8, batch_size=8, seed=3)
    task = ClassificationTask(net=_net(), optimizer=partial(torch.optim.SGD, lr=0.0))
    trainer = quiet_trainer(
        accumulate_grad_batches=4,
        max_epochs=1,
    )
    trainer.fit(task, datamodule=data)
    data.setup("fit")
    x, y = data.train_set.tensors
    with torch.no_grad():  # lr=0: the weights never moved, so the epoch mean is one forward pass
        expected = nn.functional.cross_entropy(task.net(x), y).item()
    assert trainer.callback_metrics["train/loss"].item() == pytest.approx(expected, abs=1e-5)


def test_batchnorm_warning_names_the_numbers() -> None:
    from trainwell.models import ResNet18

    bn = ResNet18(norm="batch", width=4)
    message = batchnorm_warning(
        bn, micro_batch=8, accumulate=4, world_size=16, sync_batchnorm=False
    )
    assert message is not None and "normalises over 8 samples, not 512" in message
    synced = batchnorm_warning(bn, micro_batch=8, accumulate=4, world_size=16, sync_batchnorm=True)
    assert synced is not None and "over 128 samples, not 512" in synced
    assert batchnorm_warning(bn, 8, accumulate=1, world_size=1, sync_batchnorm=False) is None
    for norm in ("group", "frozen"):
        assert batchnorm_warning(ResNet18(norm=norm, width=4), 8, 4, 1, False) is None
