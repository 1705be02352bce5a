"""What a module's outputs mean, declared by plain class attributes (no trainwell import), and the
predictions file each kind gets: nothing is argmaxed unless declared (or named) class scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from trainwell.deploy.prediction import Prediction, check_shape, defines_predict_step
from trainwell.errors import TrainwellError
from trainwell.io.kind_rows import kind_rows
from trainwell.io.output_kind import OTHER, VALUES, declared_kind

pytestmark = pytest.mark.engine


class Plain(nn.Module):  # a LightningModule needs nothing more here
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Declared(Plain):
    output_kind = "values"
    output_names = ["a", "b"]


def test_a_declaration_wins_and_without_one_only_named_classes_mean_class_scores() -> None:
    assert declared_kind(Declared(), ["x", "y"]).kind == VALUES
    assert declared_kind(Declared(), None).names == ["a", "b"]
    named = declared_kind(Plain(), ["cat", "dog"])
    assert (named.kind, named.names) == ("class_scores", ["cat", "dog"])
    assert declared_kind(Plain(), None).kind == OTHER  # nothing guessed from the output's shape


def test_an_unknown_kind_or_names_of_the_wrong_count_are_one_line() -> None:
    class Typo(Plain):
        output_kind = "regression"

    with pytest.raises(TrainwellError, match=r"Typo\.output_kind = 'regression': choose one of"):
        declared_kind(Typo(), None)
    with pytest.raises(
        TrainwellError, match=r"returns 3 columns but Declared\.output_kind names 2"
    ):
        check_shape(np.zeros((4, 3)), declared_kind(Declared(), None), Declared())


def test_values_are_written_as_returned_to_the_last_float32_bit() -> None:
    out = np.array([[196.58925, -0.1], [1e-8, 3.0]], dtype=np.float32)
    lines = kind_rows(
        np.array([7, 2]), out, np.array([[1.5, 2], [3, 4]]), declared_kind(Declared(), None)
    )
    assert lines[0] == "index,prediction_a,prediction_b,target_a,target_b"
    assert lines[1].split(",")[0] == "2"  # index order
    back = np.array([[float(c) for c in line.split(",")[1:3]] for line in lines[1:]], np.float32)
    assert (back == out[[1, 0]]).all()


def test_an_undeclared_output_is_flattened_never_argmaxed() -> None:
    out = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    lines = kind_rows(np.arange(2), out, None, declared_kind(Plain(), None))
    assert lines[0] == "index," + ",".join(f"output_{j}" for j in range(6))
    assert lines[2] == "1,6,7,8,9,10,11"


def test_the_graph_runs_predict_step_on_a_batch_of_inputs_alone() -> None:
    class Step(Plain):
        def predict_step(self, batch, batch_idx=0):
            return self(batch[0]) + 1

    assert not defines_predict_step(Plain()) and defines_predict_step(Step())
    x = torch.ones(3, 2)
    assert torch.equal(Prediction(Step())(x), x * 2 + 1)
