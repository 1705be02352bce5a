"""The example tasks' training steps make no host-device sync: a GPU's host never waits for
the device between logging steps because of them (benchmarks/host_syncs.py, on a CPU through
benchmarks/sync_probe.py: every call that would make a GPU's host wait, and who made it)."""

from __future__ import annotations

import sys

import pytest

from tests.helpers.config import REPO

sys.path.insert(0, str(REPO / "benchmarks"))  # benchmarks/ is a folder of scripts, not a package

import host_syncs


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(  # ClassificationTask on digits, the default experiment as shipped, K=1
            "default",
            marks=pytest.mark.example(
                "project.data.digits", "project.models.digits_cnn", "project.tasks.classification"
            ),
        ),
        pytest.param(  # LanguageModelTask, experiment=lm_accum: token-exact accumulation, K=4
            "lm",
            marks=pytest.mark.example(
                "project.data.sequences",
                "project.models.transformer",
                "project.tasks.language_model",
            ),
        ),
    ],
)
def test_no_host_sync_in_the_steady_training_step(case: str) -> None:
    result = host_syncs.count_syncs(case, "fp32")
    assert result["planted_seen"], "the planted .item() was not seen: the instrument is blind"
    assert result["steady_batches"] >= 10
    assert result["steady_ours"] == 0, result["steady_ours_where"]
    assert result["steady_lightning"] == 0, result["steady_lightning_where"]


@pytest.mark.slow
def test_no_host_sync_in_any_case_or_mode() -> None:
    """Every case (accumulation with on-device CIFAR-shaped batches included) in fp32, bf16 and
    bf16 + channels_last, as the benchmark prints them."""
    for case in host_syncs.CASES:
        modes = ["fp32", "bf16", "bf16_cl"] if case in host_syncs.CIFAR_SHAPED else ["bf16"]
        for mode in modes:
            result = host_syncs.count_syncs(case, mode, width=4)
            assert result["planted_seen"], (case, mode)
            assert result["steady_ours"] == 0, (case, mode, result["steady_ours_where"])
