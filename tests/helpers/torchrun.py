"""torchrun as the tests start it: bounded, with the environment its workers need."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.config import REPO
from tests.helpers.scripts import TESTS_IMPORTABLE

ENV = {**os.environ, **TESTS_IMPORTABLE, "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true"}
TORCHRUN_ENV = {**ENV, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # compat.TORCHRUN_FRESH_STORE


def run_torchrun(args: list[str], env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """(exit code, stdout + stderr) of `torchrun <args>`; None when it outlived `timeout`: then
    torchrun gets SIGTERM, which its agent passes on to the workers (each in its own session)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.Popen(
        [str(torchrun), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        return None, out
