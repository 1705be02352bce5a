"""A datamodule's own raw form: the `raw_form()` hook, and the one line without it."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn

from trainwell.deploy.raw import raw_data
from trainwell.deploy.raw_input import load_raw_input
from trainwell.errors import TrainwellError


class NoHook(L.LightningDataModule):
    pass


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


def test_an_unknown_datamodule_gets_one_line_naming_the_hook() -> None:
    with pytest.raises(TrainwellError, match=r"NoHook has no raw_form\(\) method") as err:
        raw_data(NoHook())
    assert "\n" not in str(err.value)


def test_the_hook_gives_spec_splits_preprocess_and_classes(tmp_path) -> None:
    raw = raw_data(Halves())
    assert raw.input_spec["dynamic_axes"] == {"0": "batch"} and raw.classes == ["no", "yes"]
    samples, index, targets = raw.splits["test"]
    assert index.tolist() == [10, 11, 12] and targets.tolist() == [0, 1, 0]
    assert torch.equal(raw.preprocess(torch.from_numpy(samples)), torch.from_numpy(samples) / 2)
    np.save(tmp_path / "big.npy", np.full((1, 4), 30.0, dtype=np.float32))
    with pytest.raises(TrainwellError, match=r"expected \[0, 20\]"):
        load_raw_input(tmp_path / "big.npy", raw.input_spec)


def test_a_malformed_hook_answer_is_one_line() -> None:
    class Bad(L.LightningDataModule):
        def raw_form(self) -> dict:
            return {"input": {"dtype": "float32"}, "splits": {}}

    with pytest.raises(TrainwellError, match=r"lacks shape, description"):
        raw_data(Bad())
