"""Running a benchmark script as a user runs it, in a subprocess, for its final `key=value` line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def run_benchmark(script: str, *args: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    pairs = dict(part.split("=", 1) for part in last.split())
    assert pairs, last
    return pairs
