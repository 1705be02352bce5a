"""Exact accumulation through the full run (config, builders, Trainer) on the engine tests' own
modules: micro-batches of 8 accumulated 4 times end with the weights of batches of 32, the short
tail window of each epoch (20 samples: 8 + 8 + 4) included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.config import OWNED_SMOOTH_SGD, QUIET_RUN, compose_config
from tests.helpers.state import final_weights
from trainwell.training.run import train

pytestmark = pytest.mark.engine

# 180 training samples: windows of 32 and a 20-sample tail, over two epochs.
SMALL = [
    *OWNED_SMOOTH_SGD,
    *QUIET_RUN,
    "data.val_fraction=0.1",
    "data.test_fraction=0.8",
    "trainer.max_epochs=2",
    "test=false",
]


def test_four_micro_batches_of_8_end_where_batches_of_32_do(tmp_path: Path) -> None:
    runs = {
        "accumulated": ["data.batch_size=8", "trainer.accumulate_grad_batches=4"],
        "whole": ["data.batch_size=32", "trainer.accumulate_grad_batches=1"],
    }
    weights = {}
    for name, overrides in runs.items():
        train(compose_config([*SMALL, *overrides], tmp_path / name))
        weights[name] = final_weights(tmp_path / name)
    a, b = weights["accumulated"], weights["whole"]
    assert set(a) == set(b) and a
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    assert diff <= 1e-6, diff
