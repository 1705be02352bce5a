from typing import Any

import pytest
import torch
from torch.utils.data import SequentialSampler

from project.data.digits import DigitsDataModule
from trainwell.errors import TrainwellError

pytestmark = pytest.mark.example("project.data.digits")


def _synthetic(**kwargs: Any) -> Any:
    """The loader knobs every datamodule shares (data/base.py) on the CIFAR-shaped synthetic data,
    imported by the tests that use it: deleting that example leaves the others collected."""
    from project.data.synthetic import SyntheticDataModule

    return SyntheticDataModule(**kwargs)


def test_shuffle_and_drop_last_on_train_only() -> None:
    dm = DigitsDataModule(batch_size=100, drop_last=True, seed=0)
    dm.setup("fit")
    train, val, test = dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()
    order = list(iter(train.sampler))
    assert sorted(order) == list(range(1257)) and order != sorted(order)
    assert train.drop_last
    for loader in (val, test):
        assert isinstance(loader.sampler, SequentialSampler) and not loader.drop_last
    assert len(train) == 1257 // 100 and len(val) == 2  # 180 val samples: 100 + 80


def test_train_order_is_a_function_of_the_seed() -> None:
    def first_epoch_labels(seed: int) -> torch.Tensor:
        dm = DigitsDataModule(batch_size=64, seed=seed)
        dm.setup("fit")
        torch.manual_seed(1234 + seed)  # the global RNG must not decide the order
        return torch.cat([y for _, y in dm.train_dataloader()])

    assert torch.equal(first_epoch_labels(0), first_epoch_labels(0))
    assert not torch.equal(first_epoch_labels(0), first_epoch_labels(1))


@pytest.mark.example("project.data.synthetic")
def test_pin_memory_only_with_cuda_and_persistent_workers_only_with_workers() -> None:
    dm = _synthetic(num_samples=64, num_val=8, num_test=8, pin_memory=True)
    assert dm.pin_memory == torch.cuda.is_available()
    assert not _synthetic(persistent_workers=True, num_workers=0).persistent_workers
    assert _synthetic(persistent_workers=True, num_workers=2).persistent_workers


@pytest.mark.example("project.data.synthetic")
def test_batch_larger_than_dataset_with_drop_last_is_refused() -> None:
    dm = _synthetic(num_samples=50, num_val=8, num_test=8, batch_size=64, drop_last=True)
    dm.setup("fit")
    with pytest.raises(TrainwellError, match="larger than the 50-sample train split"):
        dm.train_dataloader()


@pytest.mark.example("project.data.synthetic")
def test_empty_split_is_refused() -> None:
    dm = _synthetic(num_samples=64, num_val=0, num_test=8)
    dm.setup("fit")
    with pytest.raises(TrainwellError, match=r"val split .* is empty"):
        dm.val_dataloader()
