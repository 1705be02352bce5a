"""The exported model served by scripts/serve.py against ONNX Runtime in-process, on CPU.

    .venv/bin/python benchmarks/serving.py                          # digits_cnn and resnet18
    .venv/bin/python benchmarks/serving.py --requests 200 --models digits_cnn

For `digits_cnn` (raw float 8x8 digits) and `resnet18` (raw uint8 32x32x3 images, width from
conf/model/resnet18.yaml), each net behind its raw-input preprocessing is exported through
trainwell.deploy.export's path into a temporary export directory with a manifest (untrained
weights: speed does not depend on them). Then, side by side in one run:

- latency at batch 1, concurrency 1: p50 / p99 of `session.run` in this process (the limit) and of
  one HTTP request to the real server (`scripts/serve.py`, batching off and at its defaults);
- throughput at concurrency 32: requests/s of the server without batching (max_batch_size=1) and
  with its default dynamic batching;
- failed or lost requests under that load (any non-200 answer or broken connection);
- in-process samples/s at batch 16 over batch 1: the most that batching can gain on this CPU;
- the batched server's requests/s over in-process samples/s at batch 16 (the server's
  max_batch_size), and at concurrency 1 the p50 with batching off over the p50 with it on;
- where the CPU goes at concurrency 32, in ms per request: the inference worker, the rest of the
  server (HTTP process, queue manager, broker, main process: read from /proc for the server's
  process group) and this load generator, beside ONNX Runtime's own CPU per sample in-process.

The in-process side runs before, between and after the server sides, and each side is compared
with the mean of the in-process runs either side of it: on a shared machine a load change between
sides then moves both terms of a ratio alike.

The load generator talks to 127.0.0.1 only, sends a bounded number of requests, and is kept
light because it shares the CPU with the server: one thread per connection, raw http.client
over keep-alive connections, bodies encoded before the clock starts. Last line: the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import harness
import numpy as np

REPO = harness.REPO


def build_export(name: str, directory: Path, resnet_width: int) -> np.ndarray:
    """An export directory for `name` (graphs and manifest as export.py writes them); returns
    raw samples to send."""
    import torch
    from export import models

    from trainwell.deploy import artifact
    from trainwell.deploy.export import _export_graphs
    from trainwell.io.results import write_results

    model, raw = models(resnet_width)[name]
    directory.mkdir(parents=True)
    uint8 = raw.dtype == np.uint8
    spec = {
        "name": "inputs",
        "dtype": str(raw.dtype),
        "shape": [None, *raw.shape[1:]],
        "dynamic_axes": {"0": "batch"},
        "range": [0, 255] if uint8 else [0.0, 16.0],
    }
    _export_graphs(model, torch.from_numpy(raw[:4]), directory, spec)
    manifest = {
        "format": artifact.FORMAT,
        "version": artifact.VERSION,
        "files": artifact.file_entries(directory, (artifact.ONNX, artifact.PROGRAM)),
        "input": spec,
        "output": {"name": "logits", "classes": [str(i) for i in range(10)]},
    }
    write_results(directory / artifact.MANIFEST, manifest)
    return raw


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = np.asarray(seconds) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


# ONNX Runtime intra-op threads on every side, in-process and in the server (0: its default,
# which counts the machine's cores, not the ones a `taskset` leaves to the process).
ORT_THREADS = 0


def session_for(export: Path) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if ORT_THREADS > 0:
        options.intra_op_num_threads = ORT_THREADS
    return ort.InferenceSession(
        str(export / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )


def in_process_latency(export: Path, raw: np.ndarray, n: int) -> list[float]:
    session = session_for(export)
    times = []
    for i in range(n + 10):
        x = raw[i % len(raw)][None]
        start = time.perf_counter()
        session.run(None, {"inputs": x})
        if i >= 10:  # the first runs allocate
            times.append(time.perf_counter() - start)
    return times


def in_process_rate(export: Path, raw: np.ndarray, batch: int, n: int) -> float:
    """Samples/s of `session.run` at `batch`: what batching could gain at most, with no server."""
    session = session_for(export)
    x = raw[:batch]
    session.run(None, {"inputs": x})
    start = time.perf_counter()
    for _ in range(max(n // batch, 1)):
        session.run(None, {"inputs": x})
    return max(n // batch, 1) * batch / (time.perf_counter() - start)


def group_cpu(pgid: int) -> dict[int, float]:
    """CPU seconds (user + system) of every live process of process group `pgid`, by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ... utime stime
            seconds[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    return seconds


def cpu_per_request(before: dict[int, float], after: dict[int, float], n: int) -> tuple:
    """(ms of CPU per request in the busiest process, the inference worker; in all the others:
    HTTP process, queue manager, broker, main)."""
    used = sorted((after[pid] - before.get(pid, 0.0) for pid in after), reverse=True)
    return used[0] / n * 1e3, sum(used[1:]) / n * 1e3


def in_process(export: Path, raw: np.ndarray, requests: int, n_load: int) -> dict[str, float]:
    """One in-process run: p50/p99 ms at batch 1, samples/s at batch 16 and 1, and CPU ms (this
    process, ONNX Runtime's threads included) per sample at batch 16."""
    p50, p99 = percentiles(in_process_latency(export, raw, requests))
    cpu = time.process_time()
    b16 = in_process_rate(export, raw, 16, n_load)
    b16_cpu = (time.process_time() - cpu) / (max(n_load // 16, 1) * 16 + 16) * 1e3
    return {
        "p50": p50,
        "p99": p99,
        "b16": b16,
        "b1": in_process_rate(export, raw, 1, n_load),
        "b16_cpu": b16_cpu,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def server(export: Path, run_dir: Path, *overrides: str):
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "scripts" / "serve.py"),
            f"artifact={export}",
            f"port={port}",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit("server did not become healthy in 300 s")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        yield port, proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the server's own drain; SIGKILL if it hangs
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def bodies(raw: np.ndarray, n: int) -> list[bytes]:
    return [json.dumps({"inputs": raw[i % len(raw)][None].tolist()}).encode() for i in range(n)]


def load(port: int, payload: list[bytes], concurrency: int) -> tuple[list[float], int, float]:
    """Send every body once over `concurrency` keep-alive connections; (latencies, failures,
    requests/s)."""
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()
    shares = [payload[i::concurrency] for i in range(concurrency)]
    headers = {"Content-Type": "application/json"}

    def client(share: list[bytes]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mine, failed = [], 0
        for body in share:
            start = time.perf_counter()
            try:
                conn.request("POST", "/predict", body, headers)
                answer = conn.getresponse()
                data = answer.read()
                ok = answer.status == 200 and b'"predictions"' in data
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            mine.append(time.perf_counter() - start)
            failed += not ok
        conn.close()
        with lock:
            latencies.extend(mine)
            failures[0] += failed

    threads = [threading.Thread(target=client, args=(s,)) for s in shares]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    return latencies, failures[0], len(payload) / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["digits_cnn", "resnet18"])
    parser.add_argument("--requests", type=int, default=400, help="latency requests per side")
    parser.add_argument("--load-requests", type=int, default=0, help="0: 20 per client")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--resnet-width", type=int, default=64)
    parser.add_argument(
        "--ort-threads",
        type=int,
        default=0,
        help="ONNX Runtime intra-op threads in-process and in the server (0: its default)",
    )
    parser.add_argument(
        "--serve",
        nargs="*",
        default=[],
        help="serve.py overrides of both server sides, e.g. ort_spin=run",
    )
    parser.add_argument(
        "--batch",
        nargs="*",
        default=[],
        help="serve.py overrides of the batching side "
        "(default: conf/serve.yaml's), e.g. batch_timeout=0.002 max_batch_size=32",
    )
    args = harness.parse_args(
        parser, argv, "serving: scripts/serve.py vs ONNX Runtime in-process (CPU)", threads=0
    )
    sys.path.insert(0, str(REPO / "benchmarks"))
    global ORT_THREADS
    ORT_THREADS = args.ort_threads
    n_load = args.load_requests or 20 * args.concurrency
    figures: dict[str, float | int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            export = Path(tmp) / name / "export"
            raw = build_export(name, export, args.resnet_width)
            one = bodies(raw, args.requests + 10)
            many = bodies(raw, n_load)
            threads = (f"threads={args.ort_threads}",) if args.ort_threads else ()
            sides = {
                "nobatch": ("max_batch_size=1", *threads, *args.serve),
                "batch": (*threads, *args.serve, *args.batch),
            }
            # In-process runs before, between and after the server sides: each side is compared
            # with the mean of the in-process runs on either side of it, so that a load change
            # on the shared machine between sides moves both terms of a ratio alike.
            local = [in_process(export, raw, args.requests, n_load)]
            for side, overrides in sides.items():
                with server(export, Path(tmp) / name / f"run-{side}", *overrides) as (port, pgid):
                    load(port, one[:10], 1)  # warm-up: connections, first allocations
                    latencies, failed_1, _ = load(port, one[10:], 1)
                    p50, p99 = percentiles(latencies)
                    cpu_before, client_before = group_cpu(pgid), time.process_time()
                    _, failed_n, rate = load(port, many, args.concurrency)
                    client_ms = (time.process_time() - client_before) / n_load * 1e3
                    worker_ms, rest_ms = cpu_per_request(cpu_before, group_cpu(pgid), n_load)
                local.append(in_process(export, raw, args.requests, n_load))
                near = {k: (local[-2][k] + local[-1][k]) / 2 for k in local[-1]}
                print(
                    f"{name} server[{side}] b1 c1: p50 {p50:.2f} ms p99 {p99:.2f} ms "
                    f"(+{p50 - near['p50']:.2f} ms over in-process); c{args.concurrency}: "
                    f"{rate:.1f} req/s ({rate / near['b16']:.2f}x in-process b16), "
                    f"failed {failed_1 + failed_n}; CPU ms/request: worker {worker_ms:.2f}, "
                    f"rest of server {rest_ms:.2f}, client {client_ms:.2f} (in-process: "
                    f"{near['b16_cpu']:.2f} ms/sample at b16); load1 {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
                figures[f"{name}_{side}_p50_ms"] = p50
                figures[f"{name}_{side}_p99_ms"] = p99
                figures[f"{name}_{side}_over_inproc_p50_ms"] = p50 - near["p50"]
                figures[f"{name}_{side}_rps"] = rate
                figures[f"{name}_{side}_over_inproc_b16_x"] = rate / near["b16"]
                figures[f"{name}_{side}_worker_cpu_ms"] = worker_ms
                figures[f"{name}_{side}_rest_cpu_ms"] = rest_ms
                figures[f"{name}_{side}_client_cpu_ms"] = client_ms
                figures[f"{name}_failed"] = figures.get(f"{name}_failed", 0) + failed_1 + failed_n
            mean = {k: float(np.mean([run[k] for run in local])) for k in local[0]}
            print(
                f"{name} in-process b1 c1: p50 {mean['p50']:.2f} ms p99 {mean['p99']:.2f} ms; "
                f"samples/s batch 16 / batch 1: {mean['b16'] / mean['b1']:.2f}x "
                f"(mean of {len(local)} runs between the server sides)",
                flush=True,
            )
            figures[f"{name}_inproc_p50_ms"], figures[f"{name}_inproc_p99_ms"] = (
                mean["p50"],
                mean["p99"],
            )
            figures[f"{name}_inproc_b16_sps"] = mean["b16"]
            figures[f"{name}_inproc_b16_over_b1_x"] = mean["b16"] / mean["b1"]
            figures[f"{name}_inproc_b16_cpu_ms"] = mean["b16_cpu"]
            figures[f"{name}_batching_x"] = (
                figures[f"{name}_batch_rps"] / figures[f"{name}_nobatch_rps"]
            )
            # Targets: batched throughput against in-process at the same batch size; at
            # concurrency 1, batching on must not cost latency against batching off.
            # (`{name}_batch_over_inproc_b16_x`, set above with the batched side's figures.)
            figures[f"{name}_c1_batch_on_over_off_x"] = (
                figures[f"{name}_nobatch_p50_ms"] / figures[f"{name}_batch_p50_ms"]
            )
    harness.final_line(**figures)


if __name__ == "__main__":
    main(sys.argv[1:])
