"""ruff (lint + format) is part of the test suite, so CI refuses unformatted or lint-failing code."""

import subprocess
import sys

from tests.helpers.config import REPO


def test_ruff_check_and_format() -> None:
    for args in (["check", "."], ["format", "--check", "."]):
        proc = subprocess.run(
            [sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]
