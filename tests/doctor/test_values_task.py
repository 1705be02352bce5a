"""The doctor on a regression (tests/owned/values.py: MSE on float targets): no check asks it for
classes, the checks about classes skip saying why, and nothing fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.config import OWNED_VALUES
from tests.helpers.doctor import QUICK_PROBES, run_ids
from tests.helpers.scripts import TESTS_IMPORTABLE, run_script

pytestmark = pytest.mark.engine

VALUES = list(OWNED_VALUES)
CLASS_CHECKS = [
    "model.head_width",
    "data.split_agreement",
    "data.class_balance",
    "data.batch_composition",
]
# Advice only a classification task can follow.
CLASS_ADVICE = re.compile(
    r"num_classes attribute|class id\) pairs|class ids? to a cross.entropy|one class id per sample"
    r"|class scores per sample",
    re.IGNORECASE,
)


def test_checks_that_need_classes_skip_with_the_reason(tmp_path: Path) -> None:
    checks = run_ids(tmp_path, [*VALUES, *QUICK_PROBES], [*CLASS_CHECKS, "targets.contract"])
    for check_id in CLASS_CHECKS:
        check = checks[check_id]
        assert check.status == "skip", (check_id, check.message)
        assert check.message.startswith("the task predicts values (mse_loss on float targets)")
        assert not CLASS_ADVICE.search(check.message), check.message
    assert checks["targets.contract"].status == "pass", checks["targets.contract"].message


@pytest.mark.slow
def test_the_doctor_gives_a_regression_no_classification_advice_and_no_fail(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "doctor"
    done = run_script(
        "doctor.py", *VALUES, f"hydra.run.dir={run_dir}", env=TESTS_IMPORTABLE, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((run_dir / "doctor" / "report.json").read_text())
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert "fail" not in statuses.values(), statuses
    for check in report["checks"]:
        assert not CLASS_ADVICE.search(check["message"]), (check["id"], check["message"])
    assert not CLASS_ADVICE.search(done.stdout)
