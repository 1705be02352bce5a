import pytest
import torch

from project.data.synthetic import SyntheticDataModule

pytestmark = pytest.mark.example("project.data.synthetic")


def make(**kwargs) -> SyntheticDataModule:
    dm = SyntheticDataModule(num_samples=1000, num_val=200, num_test=200, seed=3, **kwargs)
    dm.setup("fit")
    return dm


def test_shapes_sizes_dtypes() -> None:
    dm = make()
    assert [len(dm.train_set), len(dm.val_set), len(dm.test_set)] == [1000, 200, 200]
    x, y = dm.train_set.tensors
    assert x.shape == (1000, 3, 32, 32) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and set(y.tolist()) == set(range(10))


def test_deterministic_from_seed() -> None:
    a, b = make(), make()
    assert torch.equal(a.train_set.tensors[0], b.train_set.tensors[0])
    other = SyntheticDataModule(num_samples=1000, num_val=200, num_test=200, seed=4)
    other.setup("fit")
    assert not torch.equal(a.train_set.tensors[0], other.train_set.tensors[0])


def test_learnable_by_nearest_class_mean() -> None:
    """Held-out samples are classified far above chance by the train class means: the labels carry
    signal a network can learn (and the splits share one set of class patterns)."""
    dm = make()
    x, y = dm.train_set.tensors
    means = torch.stack([x[y == c].mean(0) for c in range(10)]).flatten(1)
    xt, yt = dm.test_set.tensors
    pred = torch.cdist(xt.flatten(1), means).argmin(1)
    accuracy = (pred == yt).float().mean().item()
    assert accuracy > 0.9, accuracy
