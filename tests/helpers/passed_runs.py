"""Which tests passed on this exact tree: recorded by every pytest run in the checkout, read by
`make mutants`.

`make mutants` counts a mutant as caught only by a test that passes without it, so each test that
caught one runs again on the unmutated tree (tests/mutation/run.py). In CI, and for anyone who ran
`make test` before `make mutants`, those tests have just passed on the same files: that run is
the baseline, as long as not one byte of what the tests read has changed since. The tree is named
by a digest of every file a mutant's copy is made of (tests/mutation/run.py's COPIED), so an edit,
a new file or a deleted one makes the record unusable and the baseline runs in full.

A pytest plugin (pyproject's addopts: `-p tests.helpers.passed_runs`): the session's main process
keeps the outcomes (under xdist the workers' reports reach it) and records them at its end.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# What the tests read, and so what a mutant's copy holds (tests/mutation/run.py), and what the
# digest leaves out (run.py's copies leave out the same).
TREE_DIRS = ("src", "tests", "conf", "scripts", "notebooks", "benchmarks", "docs")
TREE_FILES = ("pyproject.toml", "README.md", "Makefile", "constraints.txt", "LICENSE")
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", "logs"}
RECORD = Path(".pytest_cache") / "trainwell" / "passed.json"
# Set by `make mutants` in its copies: their runs are not the checkout's, and need no record.
NO_RECORD_ENV = "TRAINWELL_NO_PASSED_RECORD"


def _files(root: Path) -> Iterable[Path]:
    for name in TREE_FILES:
        if (root / name).is_file():
            yield root / name
    for name in TREE_DIRS:
        for folder, dirs, files in os.walk(root / name):
            dirs[:] = sorted(
                d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
            )
            for file in sorted(files):
                if not file.endswith(".pyc"):
                    yield Path(folder) / file


def tree_digest(root: Path) -> str:
    """sha256 over the relative path and bytes of every file the tests read."""
    digest = hashlib.sha256()
    for path in _files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def record(root: Path, digest: str, passed: set[str], failed: set[str]) -> None:
    """Add this run's outcomes to the record of the tree `digest` (replacing a record of another
    tree): a test passed only if no later run on the same tree failed it."""
    path = root / RECORD
    saved = _read(path)
    known = set(saved.get("passed", [])) if saved.get("tree") == digest else set()
    known = (known | passed) - failed
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two sessions at once never share one
    tmp.write_text(json.dumps({"tree": digest, "passed": sorted(known)}))
    tmp.replace(path)


class Recorder:
    """One pytest session's outcomes, recorded at its end for the tree it started on."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.digest = ""
        self.passed: set[str] = set()
        self.failed: set[str] = set()

    def start(self, root: Path) -> None:
        if os.environ.get(NO_RECORD_ENV):
            return
        self.root, self.digest = root, tree_digest(root)

    def add(self, report: Any) -> None:
        """A pytest TestReport: a test passed if its call passed and no phase failed."""
        if self.root is None:
            return
        if report.failed:
            self.failed.add(report.nodeid)
        elif report.when == "call" and report.passed:
            self.passed.add(report.nodeid)

    def finish(self) -> None:
        if self.root is not None:
            record(self.root, self.digest, self.passed, self.failed)


def passed_here(root: Path) -> set[str]:
    """The node ids recorded as passed on the tree as it is now; empty when the record is of
    another tree (or there is none)."""
    saved = _read(root / RECORD)
    if not saved or saved.get("tree") != tree_digest(root):
        return set()
    return set(saved.get("passed", []))


def _read(path: Path) -> dict:
    """The record at `path`; {} when there is none or it was cut short (a run killed mid-write
    leaves the previous record: writes go through a temp file)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError:
        return {}


_session = Recorder()


def pytest_sessionstart(session: Any) -> None:
    if not hasattr(session.config, "workerinput"):  # an xdist worker's reports go to its main
        _session.start(session.config.rootpath)


def pytest_runtest_logreport(report: Any) -> None:
    _session.add(report)


def pytest_sessionfinish(session: Any) -> None:
    _session.finish()
