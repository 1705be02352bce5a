"""Run the real scripts (scripts/train.py, eval.py, doctor.py) in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.config import REPO


def with_pythonpath(*paths: str | Path) -> dict[str, str]:
    """The environment entry that puts `paths` first on the import path of a subprocess, keeping
    whatever PYTHONPATH the test process had (replacing it would import another checkout)."""
    entries = [str(p) for p in paths]
    if os.environ.get("PYTHONPATH"):
        entries.append(os.environ["PYTHONPATH"])
    return {"PYTHONPATH": os.pathsep.join(entries)}


# Subprocesses that load a test-support module by `_target_` (tests.helpers.killer, ...).
TESTS_IMPORTABLE = with_pythonpath(REPO)


def run_script(
    script: str,
    *overrides: str,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    python_options: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """Run scripts/<script> as a user would, in a subprocess, capturing output.
    `python_options`: interpreter options before the script (`-X importtime`)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true", **(env or {})}
    return subprocess.run(
        [sys.executable, *python_options, str(REPO / "scripts" / script), *overrides],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_ok(
    script: str, run_dir: Path, *overrides: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run scripts/<script> into `run_dir` and require success (stderr tail shown otherwise)."""
    proc = run_script(script, *overrides, f"hydra.run.dir={run_dir}", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


# What a script must not have imported when it answers a mistake: seconds of start-up on 2 cores.
HEAVY = {"torch", "lightning", "pytorch_lightning", "torchvision", "torchmetrics"}


def imported_and_stderr(proc: subprocess.CompletedProcess) -> tuple[set[str], list[str]]:
    """(top-level packages the process imported, its own stderr lines) from `-X importtime`."""
    imported, lines = set(), []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:"):
            name = line.rsplit("|", 1)[-1].strip()
            imported.add(name.split(".")[0])
        elif line.strip():
            lines.append(line)
    return imported, lines
