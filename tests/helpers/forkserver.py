"""A warm interpreter whose forks run a script, `python -m <module>` or `python -c <command>` as a
fresh process would.

A test that runs scripts/train.py spends seconds of it importing torch, Lightning and
torchvision before the script does anything, on every call; so does every pytest run of
`make mutants`. The server below imports those third-party libraries once and forks a child per
run. The child imports the repository's own code (trainwell, project, the tests) itself, so
what it runs is the code on disk at that moment, as in a fresh process: `make mutants`' smoke
mutants check exactly that, in the pytest process and in a script it starts. The child is a real
process: its own pid, exit status, signals, atexit handlers and environment.

A server is started with the environment that import-time settings come from (thread counts,
...); `WarmInterpreter.for_env` keeps one per such environment. Anything else in a run's
environment is set in the child before the script starts, and its PYTHONPATH put on the child's
import path where a fresh interpreter puts it.

Protocol, one JSON object per line: the client writes {"path", "module" or "command", "argv", "cwd",
"env", "stdout", "stderr"}; the server answers {"pid": N} when the child starts and {"code": N} (the
exit status as subprocess reports it, -N for a signal) when it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import traceback
import types
from pathlib import Path

# Third-party only: a module of the repository imported here would be the one on disk when the
# server started, not the one a later run (a mutant) put there.
WARM = (
    "numpy",
    "torch",
    "torchvision",
    "torchmetrics",
    "lightning",
    "hydra",
    "omegaconf",
    "pytest",
    "sklearn.datasets",  # the digits datamodules' loader: 0.4-0.9 s of every digits run
    "sklearn.model_selection",
)
OWN = ("trainwell", "project", "tests", "hydra_plugins", "mutants", "_bootstrap")
KEPT = 2  # servers kept per process (most runs share one environment)
# Environment read while those libraries are imported, or by the interpreter at its start: a run
# that changes one of these gets a server started with it.
IMPORT_TIME = ("PYTHON", "OMP_", "MKL_", "KMP_", "OPENBLAS", "CUDA", "TORCH", "PL_", "LIGHTNING")
# ... less those only read while running: seed_everything writes these into the test process's
# environment, and a server per seed would cost an import of torch each.
RUN_TIME = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")


def _child(request: dict) -> None:
    """Become the requested process: streams, working directory, environment, argv, then run."""
    import runpy

    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the server's next request is not its input
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    if request["stderr"] == request["stdout"]:  # one file: one offset, or they overwrite each other
        os.dup2(out, 2)
    else:
        os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
    if request.get("group"):
        os.setpgid(0, 0)  # a timeout stops the run and every process it started
    os.chdir(request["cwd"])
    started_with = os.environ.get("PYTHONPATH")  # the server's own: already on sys.path
    os.environ.clear()
    os.environ.update(request["env"])
    if started_with is None and request["env"].get("PYTHONPATH"):
        # Where a fresh interpreter puts the run's PYTHONPATH: after the script's folder (put
        # first below), before the standard library, each folder absolute and listed once.
        folders = [os.path.abspath(p) for p in request["env"]["PYTHONPATH"].split(os.pathsep)]
        sys.path[:] = list(dict.fromkeys(folders)) + [p for p in sys.path if p not in folders]
    if "command" in request:  # python -c <command>: the working directory first on the path
        sys.path.insert(0, "")
        sys.argv = ["-c", *request["argv"]]
        main = sys.modules["__main__"] = types.ModuleType("__main__")  # not the server's
        exec(compile(request["command"], "<string>", "exec"), main.__dict__)
    elif "module" in request:  # python -m <module>: the working directory first on the path
        sys.path.insert(0, os.getcwd())
        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    else:  # python <script>: the script's folder first on the path
        sys.path.insert(0, str(Path(request["path"]).parent))
        sys.argv = [request["path"], *request["argv"]]
        runpy.run_path(request["path"], run_name="__main__")


def _exit(code: object) -> None:
    """End the child as Python ends a process, minus tearing down its modules: that takes seconds
    with torch loaded (2.2 s against 0.1 s, measured), which is what the fork saved. What a
    process does at exit that a user can see is kept, in Python's order (CPython's own exit
    steps, called by their names): its non-daemon threads are joined, the atexit functions run
    (logging flushes and closes its files, multiprocessing joins its children, wandb finishes
    its run), the standard streams are flushed."""
    import atexit

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # SystemExit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    # Python's own first step of an exit: its thread exit hooks (an idle ThreadPoolExecutor's
    # workers are told to stop), then every non-daemon thread joined. Joining without the hooks
    # waits forever on an executor nobody shut down.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing is left to flush
            stream.flush()
    os._exit(status & 0xFF)


def serve() -> None:
    for name in WARM:
        __import__(name)
    early = sorted(m for m in sys.modules if m.split(".")[0] in OWN)
    if early:
        raise SystemExit(f"forkserver: the repository's own modules were imported early: {early}")
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                _child(request)
            except SystemExit as stop:
                _exit(stop.code)
            except BaseException:  # an uncaught error: its traceback and status 1, as Python does
                traceback.print_exc()
                _exit(1)
            _exit(0)  # the end of the script
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


def _startup_hooks(pythonpath: str) -> bool:
    """Whether a folder of `pythonpath` holds sitecustomize or usercustomize, which the `site`
    module imports while Python starts: only a server started with it runs them."""
    return any(
        (Path(folder) / f"{name}{suffix}").exists()
        for folder in pythonpath.split(os.pathsep)
        if folder
        for name in ("sitecustomize", "usercustomize")
        for suffix in (".py", "")
    )


class WarmInterpreter:
    """Client of one server process (started on first use, ended with the process using it)."""

    # (environment key, server), the most recently used last
    _servers: list[tuple[tuple[tuple[str, str], ...], WarmInterpreter]] = []
    _lock = threading.Lock()

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.busy = threading.Lock()  # held from `for_env` to the end of the one run it serves

    @classmethod
    def for_env(cls, env: dict[str, str]) -> WarmInterpreter:
        """An idle server for `env`, reserved for one `run`. Runs at the same time (the mutation
        runner's jobs) each get a server of their own: a server forks one run at a time."""
        # A run's PYTHONPATH is put on the child's sys.path (_child), so runs with and without
        # one share a server, unless a folder of it holds a module Python imports while it starts.
        if not _startup_hooks(env.get("PYTHONPATH", "")):
            env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        key = tuple(
            sorted(
                (k, v) for k, v in env.items() if k.startswith(IMPORT_TIME) and k not in RUN_TIME
            )
        )
        with cls._lock:
            server = None
            for entry in list(cls._servers):
                if entry[0] != key or not entry[1].busy.acquire(blocking=False):
                    continue
                cls._servers.remove(entry)
                if entry[1].proc.poll() is None:
                    server = entry[1]
                    break
                entry[1].busy.release()  # it died (a run killed it): dropped, not kept listed
                entry[1].close()
            if server is None:
                server = cls(env)
                server.busy.acquire()
            cls._servers.append((key, server))
            # Each server holds torch and Lightning in memory: a test with its own start-up
            # hooks (a temporary sitecustomize) must not leave one behind for the session.
            for entry in list(cls._servers[:-1]):
                if len(cls._servers) <= KEPT:
                    break
                if entry[1].busy.acquire(blocking=False):  # idle: nobody is running on it
                    cls._servers.remove(entry)
                    entry[1].busy.release()
                    entry[1].close()
            return server

    def close(self) -> None:
        """End the server once its current run is over (its input closes, its loop ends)."""
        with self.busy:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        self.proc.wait()

    def run(
        self,
        target: dict[str, str],
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        out: Path,
        err: Path,
        timeout: float | None,
        group: bool = False,
    ) -> int | None:
        """Exit status of the run (as subprocess gives it), or None when `timeout` killed it.
        The server was reserved by `for_env`; it is free again when the run ends."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        assert self.busy.locked(), "run() on a server that for_env did not reserve"
        request = {**target, "argv": argv, "cwd": str(cwd), "env": env, "stdout": str(out),
                   "stderr": str(err), "group": group}  # fmt: skip
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            started = self.proc.stdout.readline()
            if not started:
                raise RuntimeError(f"the warm interpreter exited with {self.proc.wait()}")
            pid = json.loads(started)["pid"]
            expired = threading.Event()

            def stop() -> None:
                expired.set()
                with contextlib.suppress(ProcessLookupError):  # it ended as the timer fired
                    os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)

            timer = threading.Timer(timeout, stop) if timeout else None
            if timer is not None:
                timer.start()
            try:
                code = json.loads(self.proc.stdout.readline())["code"]
            finally:
                if timer is not None:
                    timer.cancel()
        finally:
            self.busy.release()
        return None if expired.is_set() else code


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: each run puts its own first (the script's folder)
    serve()
