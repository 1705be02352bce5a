"""DDP with a zero-weight padding batch that shares its accumulation window with real batches.

80 samples in micro-batches of 12 are 7 global batches (six of 12, one of 8); two ranks run 4
rounds each, and rank 1 has no data in the last round: it runs a copy of rank 0's batch 6 that
must count zero items. With K=2 the last window holds rounds 2 and 3, i.e. batches 4, 5 and 6
(32 samples): counted, the copy would weigh batch 6 twice in that step's mean. (A size where the
copy is alone in its window with the batch it duplicates cannot tell: the mean of a batch and
its copy is the batch's mean.) One process with micro-batch 48 steps on the same samples.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.ranks import run_and_load


@pytest.mark.example("project.data.synthetic")
def test_a_padding_copy_sharing_a_window_with_real_batches_weighs_nothing(tmp_path: Path) -> None:
    ddp = run_and_load(
        tmp_path / "ddp",
        "trainer=ddp_sim",
        "data.batch_size=12",
        "trainer.accumulate_grad_batches=2",
    )
    plan = json.loads((tmp_path / "ddp" / "results.json").read_text())["plan"]
    assert (plan["global_batches_per_epoch"], plan["padding_batches_per_epoch"]) == (7, 1)
    assert plan["iterations_per_epoch"] == 4 and plan["optimizer_steps_per_epoch"] == 2
    single = run_and_load(tmp_path / "single", "trainer=cpu", "data.batch_size=48")
    assert set(ddp) == set(single)
    diff = max((ddp[k] - single[k]).abs().max().item() for k in ddp)
    assert diff <= 1e-6, diff


@pytest.mark.example("project.data.synthetic")
def test_fewer_batches_than_ranks_train_as_one_process(tmp_path: Path) -> None:
    """80 samples in one micro-batch of 96: rank 1's first (and only) batch is a padding copy.
    Each rank still takes part in every collective of the first step; the run ends with one
    process's weights."""
    ddp = run_and_load(tmp_path / "ddp", "trainer=ddp_sim", "data.batch_size=96")
    plan = json.loads((tmp_path / "ddp" / "results.json").read_text())["plan"]
    assert (plan["global_batches_per_epoch"], plan["padding_batches_per_epoch"]) == (1, 1)
    single = run_and_load(tmp_path / "single", "trainer=cpu", "data.batch_size=96")
    diff = max((ddp[k] - single[k]).abs().max().item() for k in ddp)
    assert diff <= 1e-6, diff
