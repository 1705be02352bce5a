"""The doctor on the engine tests' own modules (tests/owned): a clean run passes every check, and
each planted bug fails the check that names it. Nothing of the examples is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.config import OWNED
from tests.helpers.doctor import QUICK_PROBES, run_ids

pytestmark = pytest.mark.engine

# Dropout on, so validation run in train mode gives different outputs on a repeated pass.
HEALTHY = [*OWNED, "model.net.dropout=0.5", *QUICK_PROBES]
BUGS = "tests.owned.bugs"
CLEAN_IDS = [
    "params.registered",
    "optimizer.coverage",
    "loss.logits",
    "targets.contract",
    "data.finite",
    "data.leakage",
    "grad.flow",
    "grad.zeroing",
    "overfit.one_batch",
    "eval.determinism",
    "train.mode",
    "checkpoint.roundtrip",
    "accumulation.equivalence",
    "memory.graph_leak",
]


def test_a_clean_owned_run_passes_every_check(tmp_path: Path) -> None:
    checks = run_ids(tmp_path, [*HEALTHY, "trainer.accumulate_grad_batches=2"], CLEAN_IDS)
    assert set(checks) == set(CLEAN_IDS)
    assert {i: c.status for i, c in checks.items()} == dict.fromkeys(CLEAN_IDS, "pass"), {
        i: c.message for i, c in checks.items() if c.status != "pass"
    }


@pytest.mark.parametrize(
    ("override", "check_id"),
    [
        pytest.param(f"model.net._target_={BUGS}.SoftmaxNet", "loss.logits", id="softmax"),
        pytest.param(
            f"model._target_={BUGS}.TrainInValidation", "eval.determinism", id="train-in-val"
        ),
    ],
)
def test_a_planted_bug_fails_its_check(tmp_path: Path, override: str, check_id: str) -> None:
    check = run_ids(tmp_path, [*HEALTHY, override], [check_id])[check_id]
    assert check.status == "fail", check.message
