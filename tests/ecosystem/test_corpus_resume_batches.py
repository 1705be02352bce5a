"""The corpus's resume runs, one share of the cases: predict_step, a skipped batch, BatchNorm under
accumulation, container modules and dict batches (tests/ecosystem/corpus.py says what each check
holds).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ecosystem.cases import Case
from tests.ecosystem.corpus import (
    check_trains_evaluates_passes_the_doctor_and_resumes_exactly,
    share,
)


@pytest.mark.slow
@pytest.mark.parametrize("case", share("batches"), ids=lambda c: c.name)
def test_foreign_module_trains_evaluates_passes_the_doctor_and_resumes_exactly(
    case: Case, tmp_path: Path
) -> None:
    check_trains_evaluates_passes_the_doctor_and_resumes_exactly(case, tmp_path)
