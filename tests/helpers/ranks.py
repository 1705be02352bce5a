"""The small exact run that the rank tests train on 1 process and on W ranks."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.helpers.config import SMOOTH_SGD_MLP
from tests.helpers.scripts import run_ok
from tests.helpers.state import final_weights

# 80 samples = windows of 32, 32 and a 16-sample tail.
COMMON = (
    *SMOOTH_SGD_MLP,
    "data.num_samples=80",
    "data.num_val=16",
    "data.num_test=16",
    "trainer.max_epochs=1",
    "logger=csv",
    "test=false",
    "print_config=false",
)


def run_and_load(run_dir: Path, *overrides: str) -> dict[str, torch.Tensor]:
    """Train COMMON + overrides into run_dir; the final weights from its last.ckpt."""
    run_ok("train.py", run_dir, *COMMON, *overrides)
    return final_weights(run_dir)
