"""A real scripts/serve.py process on a free localhost port, and a tiny export to serve."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np

from tests.helpers.config import REPO
from trainwell.deploy import artifact
from trainwell.io.results import write_results

STARTUP_TIMEOUT_S = 240.0  # generous: the machine may be busy; never a timing assertion


def tiny_export(directory: Path, seed: int = 0) -> Path:
    """An export of a linear classifier over digits-shaped raw samples: model.onnx (built with the
    onnx helpers, no torch), a weights file and a manifest vouching for both."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = rng.normal(size=(64, 10)).astype(np.float32) / 16
    bias = rng.normal(size=(10,)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["inputs", "flat_shape"], ["flat"]),
            helper.make_node("MatMul", ["flat", "weight"], ["scores"]),
            helper.make_node("Add", ["scores", "bias"], ["logits"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("inputs", TensorProto.FLOAT, ["batch", 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=[
            numpy_helper.from_array(np.array([-1, 64], dtype=np.int64), "flat_shape"),
            numpy_helper.from_array(weight, "weight"),
            numpy_helper.from_array(bias, "bias"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    directory.mkdir(parents=True)
    onnx.save(model, directory / artifact.ONNX)
    np.save(directory / "weights.npy", weight)
    manifest = {
        "format": artifact.FORMAT,
        "version": artifact.VERSION,
        "files": artifact.file_entries(directory, (artifact.ONNX, "weights.npy")),
        "input": {
            "name": "inputs",
            "dtype": "float32",
            "shape": [None, 8, 8],
            "dynamic_axes": {"0": "batch"},
            "range": [0.0, 16.0],
        },
        "output": {"name": "logits", "classes": [f"c{i}" for i in range(10)]},
    }
    write_results(directory / artifact.MANIFEST, manifest)
    return directory


def rows_export(directory: Path, input_entry: dict) -> Path:
    """An export over rows of any length (N, T), of any numeric dtype, with the manifest input
    `input_entry`: class scores from the sum of each row (ONNX helpers, no torch)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    dtype = helper.np_dtype_to_tensor_dtype(np.dtype(input_entry["dtype"]))
    weight = np.linspace(-1, 1, 10, dtype=np.float32).reshape(1, 10) / 64
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["inputs"], ["values"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", ["values", "axes"], ["sums"], keepdims=1),
            helper.make_node("MatMul", ["sums", "weight"], ["logits"]),
        ],
        "rows",
        [helper.make_tensor_value_info("inputs", dtype, ["batch", "sequence"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=[
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"),
            numpy_helper.from_array(weight, "weight"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    directory.mkdir(parents=True)
    onnx.save(model, directory / artifact.ONNX)
    manifest = {
        "format": artifact.FORMAT,
        "version": artifact.VERSION,
        "files": artifact.file_entries(directory, (artifact.ONNX,)),
        "input": input_entry,
        "output": {"name": "logits", "classes": [str(i) for i in range(10)]},
    }
    write_results(directory / artifact.MANIFEST, manifest)
    return directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    """Whether something on this machine accepts connections on `port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def serve_command(export: Path, port: int, *overrides: str, run_dir: Path) -> list[str]:
    return [
        sys.executable,
        str(REPO / "scripts" / "serve.py"),
        f"artifact={export}",
        f"port={port}",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


def start_server(export: Path, run_dir: Path, *overrides: str) -> tuple[subprocess.Popen, str]:
    """scripts/serve.py in its own session (so its whole process group can be stopped), once
    /health answers 200. Returns the process and its base URL. Its output goes to files in
    `run_dir` (server.out, server.err): a pipe would block a reader for as long as any orphaned
    child holds it open."""
    port = free_port()
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "server.out", "w") as out, open(run_dir / "server.err", "w") as err:
        proc = subprocess.Popen(
            serve_command(export, port, *overrides, run_dir=run_dir),
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stop_group(proc)
            raise AssertionError(f"server exited {proc.returncode}: {server_errors(run_dir)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        time.sleep(0.2)
    stop_group(proc)
    raise AssertionError("server did not become healthy")


def server_errors(run_dir: Path) -> str:
    return (run_dir / "server.err").read_text()[-3000:]


def stop_group(proc: subprocess.Popen) -> None:
    """Kill the server's whole process group (whatever is left of it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


@contextlib.contextmanager
def running_server(export: Path, run_dir: Path, *overrides: str) -> Iterator[str]:
    proc, url = start_server(export, run_dir, *overrides)
    try:
        yield url
    finally:
        stop_group(proc)
