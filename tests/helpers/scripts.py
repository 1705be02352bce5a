"""Run the real scripts (scripts/train.py, eval.py, doctor.py) in their own process, as a user would."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.helpers.config import BASELINE_SCRIPTS, REPO, with_baseline
from tests.helpers.forkserver import WarmInterpreter


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
    """Run scripts/<script> as a user would, in its own process, capturing output.

    The process is a fork of a warm interpreter (tests/helpers/forkserver.py) that imported
    torch and Lightning once, not a fresh `python`: seconds less per call, the same script, code,
    argv, environment, pid, exit status and signals. `python_options` (interpreter options before
    the script, such as `-X importtime`) or TRAINWELL_TESTS_FRESH=1 start a fresh interpreter;
    the start-up tests do, to see what a fresh process imports."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true", **(env or {})}
    path = str(REPO / "scripts" / script)
    if script in BASELINE_SCRIPTS:
        overrides = tuple(with_baseline(overrides))
    if python_options:
        return subprocess.run(
            [sys.executable, *python_options, path, *overrides],
            cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    return run_python({"path": path}, list(overrides), REPO, full_env, timeout)


def run_python(
    target: dict[str, str], argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess:
    """`python <target["path"]>`, `python -m <target["module"]>` or `python -c <target["command"]>`
    with `argv`, run in `cwd` with exactly `env`, capturing output: a fork of a warm interpreter
    (tests/helpers/forkserver.py), or a fresh `python` when TRAINWELL_TESTS_FRESH=1. A test of
    what a fresh interpreter imports needs `subprocess` itself: the warm one holds torch."""
    flag = next(k for k in ("path", "module", "command") if k in target)
    how = [target[flag]] if flag == "path" else [f"-{flag[0]}", target[flag]]
    command = [sys.executable, *how]
    if os.environ.get("TRAINWELL_TESTS_FRESH") == "1":
        return subprocess.run(
            [*command, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    with tempfile.TemporaryDirectory(prefix="trainwell-run-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        code = WarmInterpreter.for_env(env).run(target, argv, cwd, env, out, err, timeout)
        stdout, stderr = (p.read_text(errors="replace") if p.exists() else "" for p in (out, err))
    if code is None:
        raise subprocess.TimeoutExpired([*command, *argv], timeout, stdout, stderr)
    return subprocess.CompletedProcess([*command, *argv], code, stdout, stderr)


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

    As in a fresh process, warnings and log records are printed to the returned stderr/stdout
    (not recorded by pytest), under Python's default warning filters. What a run leaves behind
    in the process is undone: argv, sys.path, environment, working directory, Hydra's global
    state, logging handlers, an open wandb run, the run dir locks it took, the global random generators and
    torch's deterministic-algorithms flag."""
    import runpy

    if script in BASELINE_SCRIPTS:
        overrides = tuple(with_baseline(overrides))
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with _isolated(out, err):
        os.environ.update({"PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true", **(env or {})})
        sys.argv = [str(REPO / "scripts" / script), *overrides]
        sys.path.insert(0, str(REPO / "scripts"))  # as `python scripts/<script>` does
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as exit_:
            code = exit_.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # SystemExit("message"): printed, exit status 1
        err.write(f"{code}\n")
        code = 1
    return subprocess.CompletedProcess([script, *overrides], code, out.getvalue(), err.getvalue())


# Python's own warning filters in a fresh process (`python -W` unset), most specific last.
_DEFAULT_FILTERS = (
    ("ignore", ResourceWarning),
    ("ignore", ImportWarning),
    ("ignore", PendingDeprecationWarning),
    ("ignore", DeprecationWarning),
)


@contextlib.contextmanager
def _isolated(out: io.StringIO, err: io.StringIO) -> Iterator[None]:
    import random
    import warnings

    import numpy as np
    import torch
    from hydra.core.global_hydra import GlobalHydra

    from trainwell.io import run_lock

    saved_argv, saved_path = sys.argv[:], sys.path[:]
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    rng = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    deterministic = torch.are_deterministic_algorithms_enabled()
    threads = torch.get_num_threads()
    locks_before = set(run_lock._held)
    root = logging.getLogger()
    root_handlers, root_level = root.handlers[:], root.level
    # Handlers made before the call (Lightning's, at import) write to the streams of that time:
    # point those at this call's output, as they would be in a fresh process.
    streams = {id(sys.stdout): out, id(sys.__stdout__): out}
    streams.update({id(sys.stderr): err, id(sys.__stderr__): err})
    moved = [
        (handler, handler.stream)
        for logger in [root, *logging.root.manager.loggerDict.values()]
        if isinstance(logger, logging.Logger)
        for handler in logger.handlers
        if type(handler) is logging.StreamHandler and id(handler.stream) in streams
    ]
    try:
        for handler, stream in moved:
            handler.setStream(streams[id(stream)])
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            warnings.resetwarnings()
            for action, category in _DEFAULT_FILTERS:
                warnings.filterwarnings(action, category=category)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            warnings.showwarning = _print_warning(err)
            yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        GlobalHydra.instance().clear()
        wandb = sys.modules.get("wandb")
        if wandb is not None and wandb.run is not None:
            wandb.finish()  # a process ends its run at exit; the next logger must not log into it
        for handler in root.handlers:
            if handler not in root_handlers:
                handler.close()  # Hydra's file handler on this run's log
        root.handlers[:], root.level = root_handlers, root_level
        for handler, stream in moved:
            handler.setStream(stream)
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.set_rng_state(rng[2])
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)
        for key in set(run_lock._held) - locks_before:
            run_lock.release_run_dir(Path(key))


def _print_warning(stream: io.StringIO) -> Callable[..., None]:
    import warnings

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        stream.write(warnings.formatwarning(message, category, filename, lineno, line))

    return show
