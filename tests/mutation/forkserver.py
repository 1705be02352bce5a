"""A warm interpreter for one copy of the repository: each pytest run of `make mutants` is a fork.

Every mutant's tests used to start a fresh `python -m pytest`, which spends seconds importing
torch, Lightning and torchvision before the first test runs, about a third of a typical mutant's
time. This process imports those third-party libraries once and forks a child per run. The
child imports the copy's own code (trainwell, project, the tests) itself, after the mutant was
written, so what it tests is exactly what a fresh process would test; the smoke mutants prove
it at the start of every `make mutants`.

Protocol (one JSON object per line): run.py writes {"args": [...], "log": path}; this process
answers {"pid": N} when the child starts (run.py kills its process group on a timeout) and
{"code": exit code} when it ends. The child's stdout and stderr go to `log`.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

# Third-party only: a module of the copy imported here would be the unmutated one in every child.
WARM = (
    "numpy",
    "torch",
    "torchvision",
    "torchmetrics",
    "lightning",
    "hydra",
    "omegaconf",
    "pytest",
)
OWN = ("trainwell", "project", "tests", "hydra_plugins", "mutants")


def child(request: dict) -> None:
    """Run pytest as `python -m pytest` would in this copy; never returns."""
    code = 3
    try:
        os.setpgid(0, 0)  # run.py stops the whole run, scripts it started included, on a timeout
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the next request is not the tests' input
        os.dup2(log, 1)
        os.dup2(log, 2)
        # `python -m pytest` puts the working directory first; PYTHONPATH (the copy's src/ and
        # root, set by run.py for this process) already follows.
        sys.path.insert(0, os.getcwd())
        import pytest

        code = int(pytest.main(request["args"]))
    except BaseException:  # the child must reach os._exit: a raise would run the server loop
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    sys.path.pop(0)  # this file's folder: `mutants` must not be importable by the tests
    for name in WARM:
        importlib.import_module(name)
    early = sorted(m for m in sys.modules if m.split(".")[0] in OWN)
    if early:
        raise SystemExit(f"forkserver: the copy's own modules were imported before a fork: {early}")
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            child(json.loads(line))
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
