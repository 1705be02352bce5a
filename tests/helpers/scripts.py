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


def call_script(
    script: str, *overrides: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run scripts/<script>'s own entry point in this process and return what `run_script` would:
    its exit code, stdout and stderr. For error paths and short runs where the process boundary
    is not what is under test: no fresh interpreter, no second import of torch and Lightning
    (seconds each on 2 cores). Every script keeps at least one test through `run_script`.

    What a run leaves behind in the process is undone: argv, environment, working directory,
    Hydra's global state, the run dir locks it took and torch's deterministic-algorithms flag."""
    import contextlib
    import io
    import runpy

    import torch
    from hydra.core.global_hydra import GlobalHydra

    from trainwell.io import run_lock

    saved_argv, saved_path = sys.argv[:], sys.path[:]
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    deterministic = torch.are_deterministic_algorithms_enabled()
    locks_before = set(run_lock._held)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        os.environ.update({"WANDB_SILENT": "true", **(env or {})})
        sys.argv = [str(REPO / "scripts" / script), *overrides]
        sys.path.insert(0, str(REPO / "scripts"))  # as `python scripts/<script>` does
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(sys.argv[0], run_name="__main__")
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (exit_.code is not None)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        GlobalHydra.instance().clear()
        torch.use_deterministic_algorithms(deterministic)
        for key in set(run_lock._held) - locks_before:
            run_lock.release_run_dir(Path(key))
    return subprocess.CompletedProcess(sys.argv, int(code), out.getvalue(), err.getvalue())
