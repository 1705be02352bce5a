"""Style is `make lint`, never `make test`: a cloner's ordinary code keeps the suite green, and
`make format` fixes what `make lint` reports wherever ruff can. CI lints the engine's code
(`make lint LINT_PATHS=engine`); the cloner's room is theirs."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.config import REPO

# Code as people write it on day one: a lambda bound to a name, an unpacked value left unused,
# an unused and an unsorted import, a long line.
ORDINARY = """\
import sys
import os
import numpy as np


def scale(rows):
    square = lambda v: v * v
    mean, std = np.mean(rows), np.std(rows)
    return [square(r - mean) for r in rows] + [os.sep, "a fairly long string that goes on", "and on and on"]
"""
ENGINE = {"src/trainwell", "src/hydra_plugins", "scripts", "tests", "benchmarks"}


def _ruff_lines(target: str, paths: str) -> list[list[str]]:
    """The ruff commands `make <target> LINT_PATHS=<paths>` runs, as argument lists after `ruff`."""
    proc = subprocess.run(
        ["make", "-n", "-s", target, f"LINT_PATHS={paths}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [shlex.split(line) for line in proc.stdout.splitlines() if "/ruff " in line]
    return [args[args.index(next(a for a in args if a.endswith("/ruff"))) + 1 :] for args in lines]


def _ruff(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True
    )


def test_make_format_fixes_what_make_lint_reports_on_ordinary_code(tmp_path: Path) -> None:
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "mine.py").write_text(ORDINARY)
    lint, fmt = _ruff_lines("lint", "mine.py"), _ruff_lines("format", "mine.py")
    assert lint and fmt, "make lint / make format run no ruff command"
    reported = [_ruff(args, tmp_path) for args in lint]
    assert any(p.returncode != 0 for p in reported), "make lint reports nothing on mine.py"
    for args in fmt:
        _ruff(args, tmp_path)
    after = [_ruff(args, tmp_path) for args in lint]
    assert all(p.returncode == 0 for p in after), "\n".join(p.stdout for p in after)


def test_ci_lints_the_engine_code_and_the_default_lints_everything() -> None:
    engine = _ruff_lines("lint", "engine")
    assert engine and all(set(args[-len(ENGINE) :]) == ENGINE for args in engine), engine
    assert all((REPO / path).is_dir() for path in ENGINE)
    everything = _ruff_lines("lint", ".")
    assert everything and all(args[-1] == "." for args in everything)
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert "make lint LINT_PATHS=engine" in ci
    assert not any(line.strip() == "make lint" for line in ci)  # the cloner's room is theirs
