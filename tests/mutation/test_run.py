"""The mutant runner finds a mutant's code as the formatter may have rewritten it, and plants it
once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
_spec = importlib.util.spec_from_file_location("mutation_run", HERE / "run.py")
assert _spec and _spec.loader
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)
from mutants import Mutant  # noqa: E402

WRAPPED = """\
    if (
        self.count_items(batch, reference=self.reference)
        > limit
    ):
        ratio = count / self.reference
"""


def mutant(old: str, new: str = "MUTATED") -> Mutant:
    return Mutant("m", "x.py", old, new, ("t",), "w")


def test_an_exact_occurrence_is_found_as_written() -> None:
    assert run.spans(WRAPPED, "ratio = count / self.reference") == [
        (WRAPPED.index("ratio"), WRAPPED.index("reference\n", WRAPPED.index("ratio")) + 9)
    ]


@pytest.mark.parametrize(
    "old",
    [
        "self.count_items(batch, reference=self.reference) > limit",  # one line, wrapped since
        "self.count_items(batch,\n reference=self.reference,)",  # another wrap, trailing comma
    ],
)
def test_a_reformatted_occurrence_is_found_and_planted_once(old: str) -> None:
    [(start, end)] = run.spans(WRAPPED, old)
    assert WRAPPED[start:end].startswith("self.count_items")
    mutated = run.planted(WRAPPED, mutant(old))
    assert mutated.count("MUTATED") == 1
    assert "ratio = count / self.reference" in mutated


@pytest.mark.parametrize(
    "old",
    [
        "ratio = count // self.reference",  # another operator is another program
        "self.count_items(batch, self.reference)",  # a keyword dropped
    ],
)
def test_other_code_is_not_found(old: str) -> None:
    assert run.spans(WRAPPED, old) == []


def test_only_the_short_summary_names_the_failed_tests() -> None:
    out = """\
----------------------------- Captured log call ------------------------------
ERROR    hydra.utils:utils.py:83 Error getting object at x.Data : Error loading 'x.Data'
=========================== short test summary info ============================
FAILED tests/a/test_b.py::test_c[one two] - AssertionError: assert 1 - 2
ERROR tests/a/test_d.py::test_e - RuntimeError
ERROR tests/a/test_f.py
1 failed, 2 errors in 3.00s
"""
    assert run.failed_ids(out) == [
        "tests/a/test_b.py::test_c[one two]",
        "tests/a/test_d.py::test_e",
        "tests/a/test_f.py",
    ]
