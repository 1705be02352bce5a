"""The record of which tests passed on which tree: what `make mutants` takes as its baseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.helpers import passed_runs
from tests.helpers.passed_runs import RECORD, Recorder, passed_here, record, tree_digest

REPO = Path(__file__).resolve().parents[2]


def tree(root: Path) -> Path:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "code.py").write_text("VALUE = 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_code.py").write_text("def test_value():\n    assert True\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return root


def test_a_record_holds_only_for_the_tree_it_was_made_on(tmp_path: Path) -> None:
    root = tree(tmp_path)
    record(root, tree_digest(root), {"tests/test_code.py::test_value"}, set())
    assert passed_here(root) == {"tests/test_code.py::test_value"}
    # What the digest leaves out, as the mutants' copies do: bytecode and caches.
    (root / "src" / "pkg" / "__pycache__").mkdir()
    (root / "src" / "pkg" / "__pycache__" / "code.cpython-311.pyc").write_bytes(b"\0")
    assert passed_here(root) == {"tests/test_code.py::test_value"}
    for change in (
        lambda: (root / "src" / "pkg" / "code.py").write_text("VALUE = 2\n"),  # an edit
        lambda: (root / "conf").mkdir() or (root / "conf" / "new.yaml").write_text("a: 1\n"),
        lambda: (root / "conf" / "new.yaml").unlink(),  # a deletion
        lambda: (root / "src" / "pkg" / "code.py").rename(root / "src" / "pkg" / "moved.py"),
        lambda: (root / "pyproject.toml").write_text("[project]\nname = 'y'\n"),
    ):
        before = tree_digest(root)
        change()
        assert tree_digest(root) != before
        assert passed_here(root) == set()
        record(root, tree_digest(root), {"tests/test_code.py::test_value"}, set())


def test_runs_on_one_tree_add_up_and_a_later_failure_takes_a_pass_back(tmp_path: Path) -> None:
    root = tree(tmp_path)
    digest = tree_digest(root)
    record(root, digest, {"a", "b"}, set())  # make test
    record(root, digest, {"c"}, set())  # make test-slow
    assert passed_here(root) == {"a", "b", "c"}
    record(root, digest, set(), {"b"})
    assert passed_here(root) == {"a", "c"}
    record(root, "another tree", {"d"}, set())
    assert passed_here(root) == set()
    (root / RECORD).write_text('{"tree": ')  # cut short
    assert passed_here(root) == set()


def test_a_test_passed_only_if_its_call_passed_and_no_phase_failed(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv(passed_runs.NO_RECORD_ENV, raising=False)
    root = tree(tmp_path)
    session = Recorder()
    session.start(root)

    def report(node: str, when: str, outcome: str) -> SimpleNamespace:
        return SimpleNamespace(
            nodeid=node, when=when, passed=outcome == "passed", failed=outcome == "failed"
        )

    for node, phases in {
        "ok": {"setup": "passed", "call": "passed", "teardown": "passed"},
        "fails": {"setup": "passed", "call": "failed", "teardown": "passed"},
        "setup_fails": {"setup": "failed"},
        "teardown_fails": {"setup": "passed", "call": "passed", "teardown": "failed"},
        "skipped": {"setup": "skipped"},
    }.items():
        for when, outcome in phases.items():
            session.add(report(node, when, outcome))
    session.finish()
    assert passed_here(root) == {"ok"}


def test_a_pytest_run_with_workers_records_its_passes(tmp_path: Path) -> None:
    """The plugin as pytest loads it (pyproject's addopts), under xdist as `make test` runs."""
    root = tree(tmp_path)
    (root / "tests" / "test_code.py").write_text(
        "import pytest\n\n"
        "def test_passes():\n    pass\n\n"
        "def test_fails():\n    assert False\n\n"
        "@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_each(n):\n    assert n\n"
    )
    env = {k: v for k, v in os.environ.items() if k != passed_runs.NO_RECORD_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.helpers.passed_runs", "-n", "2",
         "-p", "no:cacheprovider", "--rootdir", ".", "tests"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert passed_here(root) == {
        "tests/test_code.py::test_passes",
        "tests/test_code.py::test_each[1]",
        "tests/test_code.py::test_each[2]",
    }
    saved = json.loads((root / RECORD).read_text())
    assert saved["tree"] == tree_digest(root)
    # A mutant's copy records nothing: its runs are not the checkout's.
    (root / RECORD).unlink()
    env[passed_runs.NO_RECORD_ENV] = "1"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.helpers.passed_runs", "--rootdir", ".", "tests"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert not (root / RECORD).exists()
