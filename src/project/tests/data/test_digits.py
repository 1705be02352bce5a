import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from project.data.digits import DigitsDataModule

pytestmark = pytest.mark.example("project.data.digits")


def make(seed: int = 0) -> DigitsDataModule:
    dm = DigitsDataModule(seed=seed, batch_size=32)
    dm.setup("fit")
    return dm


def test_split_sizes_and_no_overlap() -> None:
    dm = make()
    sizes = {k: len(v) for k, v in dm.split_indices.items()}
    assert sizes == {"train": 1257, "val": 180, "test": 360}
    train, val, test = (set(dm.split_indices[k].tolist()) for k in ("train", "val", "test"))
    assert not train & val and not train & test and not val & test
    assert len(train | val | test) == 1797


def test_split_is_stratified_and_seeded() -> None:
    labels = load_digits().target
    dm = make(seed=0)
    for split in ("train", "val", "test"):
        counts = np.bincount(labels[dm.split_indices[split]], minlength=10)
        share = counts / counts.sum()
        assert np.abs(share - 0.1).max() < 0.02, (split, counts)
    again, other = make(seed=0), make(seed=1)
    assert np.array_equal(dm.split_indices["test"], again.split_indices["test"])
    assert not np.array_equal(dm.split_indices["test"], other.split_indices["test"])


def test_dtypes_shapes_and_train_only_normalisation() -> None:
    dm = make()
    x, y = dm.train_set.tensors
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.shape == (1257, 1, 8, 8)
    raw = load_digits().data.astype(np.float32)
    train_raw = raw[dm.split_indices["train"]]
    # Statistics are the train split's, not the whole dataset's (which would leak test data).
    assert dm.mean == float(train_raw.mean()) and dm.std == float(train_raw.std())
    assert dm.mean != float(raw.mean())
    assert abs(float(x.mean())) < 1e-5 and abs(float(x.std(unbiased=False)) - 1) < 1e-5
    x_test, _ = dm.test_set.tensors
    expected = (raw[dm.split_indices["test"]].reshape(-1, 1, 8, 8) - dm.mean) / dm.std
    assert torch.equal(x_test, torch.from_numpy(expected))
