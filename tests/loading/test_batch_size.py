"""The template's per-step batch size agrees with Lightning's `extract_batch_size` on every shape
of batch users bring (its fast path must never give another answer than Lightning would)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
import torch
from lightning.pytorch.utilities.data import extract_batch_size
from torch import nn

from trainwell.loading.batch_size import batch_size

pytestmark = pytest.mark.engine  # needs nothing of the examples


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


BATCHES: dict[str, Any] = {
    "tensor": torch.zeros(7, 3),
    "scalar tensor": torch.tensor(2.0),
    "empty tensor": torch.zeros(0, 4),
    "tuple": (torch.zeros(5, 3), torch.zeros(5, dtype=torch.long)),
    "list": [torch.zeros(6, 2, 2), torch.zeros(6)],
    "dict": {"tokens": torch.zeros(4, 9, dtype=torch.long), "mask": torch.ones(4, 9)},
    "scalar first": (torch.tensor(1.0), torch.zeros(3)),
    "ambiguous sizes": (torch.zeros(3, 2), torch.zeros(8)),
    "nested": ((torch.zeros(2, 3), torch.zeros(2)), torch.zeros(2)),
    "dict of tuples": {"a": (torch.zeros(3), torch.zeros(3))},
    "strings first": (["a", "bb"], torch.zeros(2)),
    "parameter": (nn.Parameter(torch.zeros(4, 2)), torch.zeros(4)),
    "dataclass": Pair(torch.zeros(9, 1), torch.zeros(9)),
    "tensor then none": (torch.zeros(3), None),
}


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch_size_is_lightnings(name: str) -> None:
    batch = BATCHES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning warns about the ambiguous ones
        expected = int(extract_batch_size(batch))
    assert batch_size(batch) == expected
