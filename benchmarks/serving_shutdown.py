"""SIGTERM to a server's main process: out-of-the-box LitServe vs scripts/serve.py.

    .venv/bin/python benchmarks/serving_shutdown.py

Each server is started in its own session on a free 127.0.0.1 port, answers one request, and
gets SIGTERM in its main process (what Kubernetes sends to a container's first process). Printed
per server: the main process's exit code and seconds to exit, how many of its child processes
are still running 2 s later, and whether /health still answers then. Everything left is killed
with SIGKILL at the end. Last line: the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
import psutil
from serving import build_export, free_port

REPO = harness.REPO

STOCK = """
import sys
import litserve as ls

class Echo(ls.LitAPI):
    def setup(self, device):
        self.ready = True

    def predict(self, x):
        return x

if __name__ == "__main__":
    ls.LitServer(Echo(), accelerator="cpu").run(
        port=int(sys.argv[1]), host="127.0.0.1", generate_client_file=False, log_level="warning"
    )
"""


def healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


def measure(command: list[str], port: int, body: bytes) -> dict[str, float | int]:
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    family: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 180
        while not healthy(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{command[1]} did not start (exit {proc.returncode})")
            time.sleep(0.2)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
        if conn.getresponse().status != 200:
            raise SystemExit(f"{command[1]}: the request before SIGTERM failed")
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
            exit_s = time.monotonic() - start
        except subprocess.TimeoutExpired:
            code, exit_s = -999, float("inf")
        time.sleep(2.0)
        left = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        return {
            "exit_code": code,
            "exit_s": exit_s,
            "children": len(family) - 1,
            "left": len(left),
            "health_after": int(healthy(port)),
        }
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for p in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    harness.parse_args(parser, argv, "serving_shutdown: SIGTERM, stock LitServe vs serve.py", 0)
    figures: dict[str, float | int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "export"
        build_export("digits_cnn", export, 16)
        # A file, not `python -c`: LitServe's spawned worker imports the API's module by path.
        script = Path(tmp) / "stock_server.py"
        script.write_text(STOCK)
        port = free_port()
        stock = measure([sys.executable, str(script), str(port)], port, b'{"x": 1}')
        port = free_port()
        ours = measure(
            [
                sys.executable,
                str(REPO / "scripts" / "serve.py"),
                f"artifact={export}",
                f"port={port}",
                f"hydra.run.dir={Path(tmp) / 'run'}",
            ],
            port,
            b'{"inputs": [[' + b", ".join([b"[" + b"1.0, " * 7 + b"1.0]"] * 8) + b"]]}",
        )
    for name, result in (("stock", stock), ("serve", ours)):
        print(
            f"{name}: main exit code {result['exit_code']} after {result['exit_s']:.2f} s; "
            f"{result['left']} of {result['children']} children still running 2 s later; "
            f"/health {'still answers' if result['health_after'] else 'gone'}",
            flush=True,
        )
        figures.update({f"{name}_{k}": v for k, v in result.items()})
    harness.final_line(**figures)


if __name__ == "__main__":
    main(sys.argv[1:])
