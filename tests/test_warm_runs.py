"""The tests' warm interpreter (tests/helpers/forkserver.py) runs a script, `-m` module or `-c`
command as a fresh `python` would: the same import path, argv, working directory, environment
and exit status. Every script run of the suite goes through it, so a difference here would be a
difference between what the tests saw and what a user's shell runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.scripts import run_python

REPORT = (
    "import json, os, sys\n"
    "print(json.dumps({'path': sys.path, 'argv': sys.argv, 'cwd': os.getcwd(),\n"
    "                  'env': dict(os.environ), 'main': __name__}))\n"
    "sys.exit(3)\n"
)


@pytest.mark.parametrize("how", ["path", "module", "command"])
@pytest.mark.parametrize("pythonpath", [False, True])
def test_a_warm_run_sees_what_a_fresh_interpreter_sees(
    tmp_path: Path, how: str, pythonpath: bool
) -> None:
    (tmp_path / "report.py").write_text(REPORT)
    target = {"path": str(tmp_path / "report.py"), "module": "report", "command": REPORT}[how]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONUNBUFFERED"] = "1"
    if pythonpath:  # two folders, the first relative to the working directory
        (tmp_path / "lib").mkdir()
        env["PYTHONPATH"] = os.pathsep.join(["lib", str(tmp_path / "elsewhere")])
    flag = {"path": [], "module": ["-m"], "command": ["-c"]}[how]
    fresh = subprocess.run(
        [sys.executable, *flag, target, "a", "b c"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    warm = run_python({how: target}, ["a", "b c"], tmp_path, env, timeout=60)
    assert (warm.returncode, fresh.returncode) == (3, 3), warm.stderr + fresh.stderr
    assert json.loads(warm.stdout) == json.loads(fresh.stdout)
