"""A datamodule's own raw form: the `raw_form()` hook, and without it the batch form its loaders
yield."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainwell.deploy.raw import forward_batch, raw_data
from trainwell.deploy.raw_input import read_raw_input
from trainwell.errors import TrainwellError


class NoHook(L.LightningDataModule):
    """No raw_form(), no state: (x, label) batches of a plain TensorDataset, as public projects
    write them."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(10, 3, generator=g), torch.arange(10) % 3

    def test_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x, self.y), batch_size=4)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x, self.y.float()), batch_size=4)

    def predict_dataloader(self) -> list[dict]:
        return [{"x": self.x}]


class _Half(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / 2


class Halves(L.LightningDataModule):
    """Raw samples are twice the model's input: the preprocessing halves them."""

    def raw_form(self) -> dict:
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        return {
            "input": {
                "dtype": "float32",
                "shape": [None, 4],
                "description": "doubled",
                "range": [0, 20],
            },
            "splits": {"test": (x, range(10, 13), np.array([0, 1, 0]))},
            "preprocess": _Half(),
            "classes": ["no", "yes"],
        }


def test_without_the_hook_a_split_is_its_batch_form_in_loader_order() -> None:
    raw = raw_data(NoHook(), "test")
    samples, index, targets = raw.splits["test"]
    assert raw.batch_form and raw.spec.form == "batch"
    assert raw.spec.shape == (None, 3) and raw.spec.range is None
    assert np.array_equal(samples, NoHook().x.numpy()) and index.tolist() == list(range(10))
    assert targets.tolist() == (torch.arange(10) % 3).tolist()
    assert isinstance(raw.preprocess, nn.Identity)
    assert raw_data(NoHook(), "val").splits["val"][2] is None  # float second items are no labels
    for split, words in [("predict", "dict batches"), ("train", "no train_dataloader")]:
        with pytest.raises(TrainwellError, match=words) as err:
            raw_data(NoHook(), split)
        assert "\n" not in str(err.value)


def test_the_hook_gives_spec_splits_preprocess_and_classes(tmp_path) -> None:
    raw = raw_data(Halves())
    assert raw.spec.manifest()["dynamic_axes"] == {"0": "batch"} and raw.classes == ["no", "yes"]
    samples, index, targets = raw.splits["test"]
    assert index.tolist() == [10, 11, 12] and targets.tolist() == [0, 1, 0]
    assert torch.equal(raw.preprocess(torch.from_numpy(samples)), torch.from_numpy(samples) / 2)
    np.save(tmp_path / "big.npy", np.full((1, 4), 30.0, dtype=np.float32))
    with pytest.raises(TrainwellError, match=r"must lie in \[0, 20\]"):
        raw.spec.check(read_raw_input(tmp_path / "big.npy", raw.spec))


def test_a_malformed_hook_answer_is_one_line() -> None:
    class Bad(L.LightningDataModule):
        def raw_form(self) -> dict:
            return {"input": {"dtype": "float32"}, "splits": {}}

    with pytest.raises(TrainwellError, match=r"lacks shape, description"):
        raw_data(Bad())


def test_a_forward_that_cannot_take_the_batch_is_one_line() -> None:
    generator = nn.Linear(4, 8)  # a GAN's forward: latent vectors, not the data's 3 features
    batch = next(iter(NoHook().test_dataloader()))
    assert forward_batch(nn.Linear(3, 2), batch, "NoHook").shape == (4, 2)
    with pytest.raises(TrainwellError, match=r"Linear\.forward cannot take the input") as err:
        forward_batch(generator, batch, "NoHook")
    assert "\n" not in str(err.value) and "[4, 3]" in str(err.value)
