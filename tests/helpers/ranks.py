"""The small exact run that the rank tests train on 1 process and on W ranks."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.helpers.config import OWNED_SMOOTH_SGD, SMOOTH_SGD_MLP
from tests.helpers.scripts import TESTS_IMPORTABLE, run_ok
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


# The same on the engine tests' own digits modules: 180 training samples = windows of 32 and a
# 20-sample tail, shared unevenly by 2 ranks (90 each: micro-batches of 8 end in a 2-sample one).
OWNED_COMMON = (
    *OWNED_SMOOTH_SGD,
    "data.val_fraction=0.1",
    "data.test_fraction=0.8",
    "trainer.max_epochs=1",
    "logger=csv",
    "test=false",
    "print_config=false",
)


def run_and_load(
    run_dir: Path, *overrides: str, common: tuple[str, ...] = COMMON
) -> dict[str, torch.Tensor]:
    """Train `common` + overrides into run_dir; the final weights from its last.ckpt."""
    run_ok("train.py", run_dir, *common, *overrides, env=TESTS_IMPORTABLE)
    return final_weights(run_dir)
