"""No host-device sync between logging steps under the default callbacks (the GPU tests), and
the counting harness itself on the CPU (which batches it treats as reading steps)."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.helpers.config import REPO

sys.path.insert(0, str(REPO / "benchmarks"))  # benchmarks/ is a folder of scripts, not a package

import host_syncs

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.slow
def test_the_harness_measures_the_window_and_marks_the_reading_batches() -> None:
    """K=4, log_every_n_steps=4: in steps [2, 14) the reading batches are the last micro-batch
    of steps 4, 8 and 12; the planted sync sits in a batch of its own."""
    result = host_syncs.count_syncs("k4", extra=["model.net.width=4"])
    batches = result["batches"]
    assert [b["batch"] for b in batches] == list(range(8, 56))
    assert [b["batch"] for b in batches if b["reading"]] == [19, 35, 51]
    assert [b["batch"] for b in batches if b["planted"]] == [31]
    if not torch.cuda.is_available():
        assert result["syncs_outside_reading_steps"] == 0  # nothing is counted without a GPU


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("case", sorted(host_syncs.CASES))
def test_no_host_sync_between_logging_steps(case: str) -> None:
    result = host_syncs.count_syncs(case)
    assert result["planted_seen"], "the planted .item() was not seen: the instrument is blind"
    assert result["syncs_outside_reading_steps"] == 0, result["offenders"]
