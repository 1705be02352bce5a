"""Shipping: what exporting costs, and how the exported model answers when served. One runner,
one part per figure set, on the harness (one opening, interleaved sides, one last line).

    .venv/bin/python benchmarks/shipping.py export    # export time; eager / ONNX Runtime / torch.export samples/s
    .venv/bin/python benchmarks/shipping.py serving   # scripts/serve.py vs a LitServe server vs ONNX Runtime in-process
    .venv/bin/python benchmarks/shipping.py shutdown  # SIGTERM: stock LitServe vs scripts/serve.py
    python benchmarks/shipping.py peer --export <export dir> --port 8001   # the LitServe peer alone

`PART -h` says what a part measures and which figures its last line prints. `peer` is the server
`serving` measures scripts/serve.py against (started by it; it prints no figures).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import harness
import litserve as ls
import numpy as np
import psutil

if TYPE_CHECKING:
    from torch import nn

REPO = harness.REPO
Figures = dict[str, float | int | str]


# --- export ------------------------------------------------------------------------------------

# Only the batch axis is dynamic for both nets (what export_checkpoint gives an image model).
BATCH_ONLY = {"dynamic_axes": {"0": "batch"}}


def models(resnet_width: int) -> dict[str, tuple[nn.Module, np.ndarray]]:
    """Each net behind its raw-input preprocessing (deploy/raw.py's graph form), untrained, with
    256 raw samples of its input."""
    from project.data.cifar10 import CIFAR10_MEAN, CIFAR10_STD
    from project.models.digits_cnn import DigitsCNN
    from project.models.resnet import ResNet18
    from trainwell.blocks.preprocess import ImageNormalize, Normalize
    from trainwell.deploy.raw import RawModel

    rng = np.random.default_rng(0)
    digits = RawModel(Normalize(4.9, 6.0, (1, 8, 8)), DigitsCNN(num_classes=10)).eval()
    # CIFAR-10's eval-time preprocessing of raw uint8 HWC images, as the CIFAR export has it.
    preprocess = ImageNormalize(CIFAR10_MEAN, CIFAR10_STD)
    resnet = RawModel(preprocess, ResNet18(num_classes=10, width=resnet_width)).eval()
    return {
        "digits_cnn": (digits, rng.uniform(0, 16, (256, 8, 8)).astype(np.float32)),
        "resnet18": (resnet, rng.integers(0, 256, (256, 32, 32, 3), dtype=np.uint8)),
    }


def throughput(fn, batch: np.ndarray, seconds: float) -> float:
    fn(batch)  # warm-up
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn(batch)
        n += 1
    return n * len(batch) / (time.perf_counter() - start)


def export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="per side, batch and rep")
    parser.add_argument("--resnet-width", type=int, default=16)


def run_export(args: argparse.Namespace) -> Figures:
    """Export time and inference throughput of the three deployable forms of a net.

    For `digits_cnn` (raw float 8x8 digits) and `resnet18` (raw uint8 32x32x3 images), each net
    behind its raw-input preprocessing (deploy/raw.py's graph form) is exported once per
    repetition through trainwell.deploy.export's path (torch.export, then ONNX opset 18) and
    timed; then samples/s at batch 1 and batch 256 through eager PyTorch under inference_mode,
    ONNX Runtime (CPU) and the torch.export program, the three sides interleaved. Weights are
    untrained: speed does not depend on them. Printed per model and batch: samples/s of each
    side, ratios to eager and the fastest; last line: `<model>_export_s=..
    <model>_b<batch>_<side>_sps=..`."""
    import onnxruntime as ort
    import torch

    from trainwell.deploy.export import _export_graphs

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(torch.get_num_threads(), 1)
    figures: Figures = {}
    for name, (model, raw) in models(args.resnet_width).items():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            times = []
            for _ in range(args.reps):
                start = time.perf_counter()
                _export_graphs(model, torch.from_numpy(raw[:4]), out, BATCH_ONLY)
                times.append(time.perf_counter() - start)
            harness.figure(figures, f"{name}_export_s", times, f"{name} export_s", "s")
            session = ort.InferenceSession(
                str(out / "model.onnx"), opts, providers=["CPUExecutionProvider"]
            )
            program = torch.export.load(str(out / "model.pt2")).module()

            def eager(x: np.ndarray, model: nn.Module = model) -> None:
                with torch.inference_mode():
                    model(torch.from_numpy(x))

            def onnx(x: np.ndarray, session=session) -> None:
                session.run(None, {"inputs": x})

            def pt2(x: np.ndarray, program=program) -> None:
                with torch.inference_mode():
                    program(torch.from_numpy(x))

            for batch in (1, 256):
                x = raw[:batch]
                sides = {
                    side: (lambda fn=fn, x=x: throughput(fn, x, args.seconds))
                    for side, fn in (("eager", eager), ("onnxruntime", onnx), ("torch_export", pt2))
                }
                runs = harness.interleaved(sides, args.reps)
                med = {side: statistics.median(v) for side, v in runs.items()}
                for side, values in runs.items():
                    label = f"{name} b{batch} {side}"
                    harness.figure(
                        figures, f"{name}_b{batch}_{side}_sps", values, label, " samples/s"
                    )
                ratios = " ".join(f"{side}/eager={med[side] / med['eager']:.2f}" for side in med)
                best = max(med, key=med.get)
                print(f"{name} batch={batch}: {ratios} fastest={best}", flush=True)
    return figures


# --- serving -----------------------------------------------------------------------------------


def build_export(name: str, directory: Path, resnet_width: int) -> np.ndarray:
    """An export directory for `name` (graphs and manifest as trainwell's export writes them); returns
    raw samples to send."""
    import torch

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


def in_process(export: Path, raw: np.ndarray, n_load: int) -> dict[str, float]:
    """One in-process run: samples/s at batch 16 and 1, and CPU ms (this process, ONNX Runtime's
    threads included) per sample at batch 16."""
    cpu = time.process_time()
    b16 = in_process_rate(export, raw, 16, n_load)
    b16_cpu = (time.process_time() - cpu) / (max(n_load // 16, 1) * 16 + 16) * 1e3
    return {"b16": b16, "b1": in_process_rate(export, raw, 1, n_load // 4), "b16_cpu": b16_cpu}


def healthy(port: int, timeout: float) -> bool:
    """Whether the server on `port` answers /health with 200."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(command: list[str], port: int) -> subprocess.Popen:
    """A server in its own session (its process group is what is paused, resumed and stopped),
    once /health answers 200."""
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not healthy(port, timeout=5):
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            stop(proc, signal.SIGKILL)
            raise SystemExit("server did not become healthy in 300 s")
        time.sleep(0.2)
    return proc


def stop(proc: subprocess.Popen, how: signal.Signals) -> None:
    """Our server drains on SIGTERM; stock LitServe leaves its children running on SIGTERM, so
    its group gets SIGKILL. Either way, SIGKILL for whatever is left after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGCONT)  # a paused group cannot act on SIGTERM
        os.killpg(proc.pid, how)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # LitServe's children outlive its main process


def pause(proc: subprocess.Popen, paused: bool) -> None:
    """SIGSTOP the server's whole process group while the others are measured (an idle LitServe
    worker polls its queue, which would take CPU from the side being measured); SIGCONT to
    measure it."""
    os.killpg(proc.pid, signal.SIGSTOP if paused else signal.SIGCONT)


def json_body(sample: np.ndarray) -> bytes:
    return json.dumps({"inputs": sample[None].tolist()}).encode()


def npy_bytes(sample: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, sample[None])
    return buffer.getvalue()


# How each side takes a body of each kind: our server reads a .npy body as is; LitServe reads
# every body that is not a form as JSON, so the peer takes the same .npy bytes base64-encoded in
# JSON (the peer, below).
JSON_HEADERS = {"Content-Type": "application/json"}
ENCODINGS: dict[str, tuple[Callable[[np.ndarray], bytes], dict[str, str]]] = {
    "json": (json_body, JSON_HEADERS),
    "npy": (npy_bytes, {"Content-Type": "application/x-npy"}),
    "npy_in_json": (
        lambda x: json.dumps({"npy": base64.b64encode(npy_bytes(x)).decode()}).encode(),
        JSON_HEADERS,
    ),
}


def bodies(raw: np.ndarray, n: int, encoding: str) -> list[bytes]:
    encode = ENCODINGS[encoding][0]
    return [encode(raw[i % len(raw)]) for i in range(n)]


def load(
    port: int, payload: list[bytes], concurrency: int, headers: dict[str, str]
) -> tuple[list[float], int, float]:
    """Send every body once over `concurrency` keep-alive connections; (latencies, failed or lost
    requests, requests/s)."""
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()
    shares = [payload[i::concurrency] for i in range(concurrency)]

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


def measure(
    port: int, pgid: int, many: list[bytes], encoding: str, concurrency: int
) -> dict[str, float]:
    """One body kind on one server at `concurrency`: requests/s, failures, and CPU ms per request
    in the worker, the rest of the server and the client."""
    headers = ENCODINGS[encoding][1]
    cpu_before, client_before = group_cpu(pgid), time.process_time()
    _, failed, rate = load(port, many, concurrency, headers)
    client_ms = (time.process_time() - client_before) / len(many) * 1e3
    worker_ms, rest_ms = cpu_per_request(cpu_before, group_cpu(pgid), len(many))
    return {
        "rps": rate,
        "failed": failed,
        "worker": worker_ms,
        "rest": rest_ms,
        "client": client_ms,
    }


def paired_latency(
    servers: dict[str, tuple[subprocess.Popen, int]],
    load_bodies: dict[str, tuple[list[bytes], list[bytes]]],
    export: Path,
    raw: np.ndarray,
    requests: int,
    block: int,
) -> dict[tuple[str, str], tuple[list[float], int]]:
    """Concurrency 1, paired: `block` requests to one side at a time (the others paused), every
    side once per block of rounds, the order rotating, ONNX Runtime in-process (batch 1) being
    one more side. Every side then meets the same changes in the machine's load, minute by
    minute. Returns (latencies, failed requests) per (side, body kind)."""
    session = session_for(export)
    keys = [("inproc", "array")] + [(s, e) for s, encs in SIDE_ENCODINGS.items() for e in encs]
    out: dict[tuple[str, str], tuple[list[float], int]] = {key: ([], 0) for key in keys}
    for side, encoding in keys[1:]:  # warm-up: connections, first allocations
        proc, port = servers[side]
        pause(proc, False)
        sent = sent_as(side, encoding)
        load(port, load_bodies[sent][0][:10], 1, ENCODINGS[sent][1])
        pause(proc, True)
    for _ in range(10):
        session.run(None, {"inputs": raw[:1]})
    for n, start in enumerate(range(10, requests + 10, block)):
        shift = n % len(keys)
        for side, encoding in keys[shift:] + keys[:shift]:
            latencies, failed = out[(side, encoding)]
            if side == "inproc":
                for i in range(start, start + block):
                    x = raw[i % len(raw)][None]
                    begin = time.perf_counter()
                    session.run(None, {"inputs": x})
                    latencies.append(time.perf_counter() - begin)
                continue
            proc, port = servers[side]
            one = load_bodies[sent_as(side, encoding)][0][start : start + block]
            pause(proc, False)
            # The first request after the pause wakes every process of the server: not counted.
            load(port, one[:1], 1, ENCODINGS[sent_as(side, encoding)][1])
            more, more_failed, _ = load(port, one, 1, ENCODINGS[sent_as(side, encoding)][1])
            pause(proc, True)
            latencies.extend(more)
            out[(side, encoding)] = (latencies, failed + more_failed)
    return out


def sent_as(side: str, encoding: str) -> str:
    """The body kind a side is sent for `encoding`: the peer takes .npy bytes inside JSON."""
    return "npy_in_json" if side == "litserve" and encoding == "npy" else encoding


def serve_setting(overrides: list[str], key: str) -> str:
    """A serve.py setting as the batching side runs it: its last override, else conf/serve.yaml."""
    for item in reversed(overrides):
        if item.split("=", 1)[0].lstrip("+") == key:
            return item.split("=", 1)[1]
    from omegaconf import OmegaConf

    return str(OmegaConf.load(REPO / "conf" / "serve.yaml")[key])


def peer_command(export: Path, port: int, overrides: list[str]) -> list[str]:
    """benchmarks/shipping.py peer with the batching side's max batch size, batch timeout, ONNX
    Runtime threads and spinning, and LitServe transport."""
    command = [
        sys.executable,
        str(REPO / "benchmarks" / "shipping.py"),
        "peer",
        f"--export={export}",
        f"--port={port}",
        f"--max-batch-size={serve_setting(overrides, 'max_batch_size')}",
        f"--batch-timeout={serve_setting(overrides, 'batch_timeout')}",
        f"--threads={serve_setting(overrides, 'threads')}",
        f"--spin={serve_setting(overrides, 'ort_spin')}",
    ]
    if serve_setting(overrides, "fast_queue").lower() == "true":
        command.append("--fast-queue")
    return command


def serve_command(export: Path, port: int, run_dir: Path, overrides: tuple[str, ...]) -> list[str]:
    return [
        sys.executable,
        str(REPO / "scripts" / "serve.py"),
        f"artifact={export}",
        f"port={port}",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


# What each side is sent: our server without and with batching, and the LitServe peer.
SIDE_ENCODINGS = {"nobatch": ("json",), "batch": ("json", "npy"), "litserve": ("json", "npy")}


def median(values: list[float]) -> float:
    return float(np.median(values))


def serving_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", nargs="+", default=["digits_cnn", "resnet18"])
    parser.add_argument("--requests", type=int, default=400, help="latency requests per side")
    parser.add_argument("--load-requests", type=int, default=0, help="0: 20 per client")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="c32 rounds of every side")
    parser.add_argument(
        "--block", type=int, default=20, help="c1 requests to one side before the next side's"
    )
    parser.add_argument("--resnet-width", type=int, default=64)
    parser.add_argument(
        "--ort-threads",
        type=int,
        default=0,
        help="ONNX Runtime intra-op threads in-process and in every server (0: its default)",
    )
    parser.add_argument(
        "--serve",
        nargs="*",
        default=[],
        help="serve.py overrides of both of our server sides, e.g. ort_spin=run (the peer "
        "follows the batching side's)",
    )
    parser.add_argument(
        "--batch",
        nargs="*",
        default=[],
        help="serve.py overrides of the batching side "
        "(default: conf/serve.yaml's), e.g. batch_timeout=0.002 max_batch_size=32",
    )


def run_serving(args: argparse.Namespace) -> Figures:
    """The exported model served by scripts/serve.py, against a LitServe server written the way
    LitServe's documentation shows and against ONNX Runtime in-process, on CPU.

    For `digits_cnn` (raw float 8x8 digits) and `resnet18` (raw uint8 32x32x3 images, width from
    conf/model/resnet18.yaml), each net behind its raw-input preprocessing is exported through
    trainwell.deploy.export's path into a temporary export directory with a manifest (untrained
    weights: speed does not depend on them). Three servers of that export are started, each paused
    (SIGSTOP of its process group) while the others are measured:

    - `nobatch`: scripts/serve.py with max_batch_size=1;
    - `batch`: scripts/serve.py at its defaults (dynamic batching);
    - `litserve`: the `peer` part below, a LitAPI whose decode_request, batch, predict,
      unbatch and encode_response wrap an ONNX Runtime session over the same model.onnx, with the
      batching side's max batch size, batch timeout, ONNX Runtime threads and spinning, and
      LitServe transport; it checks nothing.

    Each is sent one sample per request by the same load generator. At concurrency 1, p50 / p99
    latency, measured in blocks of `--block` requests to one side at a time, every side once per
    block of rounds, the order rotating, with ONNX Runtime in-process at batch 1 (the limit no server
    reaches) as one more side: every side meets the same changes in the shared machine's load. At
    concurrency 32, requests/s, in `--rounds` rounds of every side, the order rotating, with ONNX
    Runtime in-process at batch 16 before the first side and after each (each side is compared with
    the mean of the in-process runs either side of it, ours with the peer within the same round).
    Failed or lost requests (any non-200 answer or broken connection) are counted everywhere.
    `batch` and `litserve` are also sent the samples as a .npy file: ours as the body
    (`Content-Type: application/x-npy`), the peer base64-encoded in JSON, since LitServe reads every
    body that is not a form as JSON. Printed beside them: in-process samples/s at batch 16 over
    batch 1 (the most batching can gain on this CPU), and where the CPU goes at concurrency 32, in
    ms per request: the inference worker, the rest of the server (HTTP process, queue manager,
    broker, main process: read from /proc for the server's process group) and this load generator,
    beside ONNX Runtime's own CPU per sample in-process.

    The figures are medians over the rounds (c32) and percentiles over every block (c1);
    `batched_vs_litserve` (our req/s over the peer's at concurrency 32, batching on) and
    `c1_over_litserve_ms` (our p50 minus the peer's at concurrency 1, batching on), and their `_npy`
    twins, are resnet18's (the last model's when resnet18 is not run).

    The load generator talks to 127.0.0.1 only, sends a bounded number of requests, and is kept
    light because it shares the CPU with the server: one thread per connection, raw http.client
    over keep-alive connections, bodies encoded before the clock starts. Last line: the figures."""
    global ORT_THREADS
    ORT_THREADS = args.ort_threads
    n_load = args.load_requests or 20 * args.concurrency
    # A benchmark stopped with SIGTERM (timeout, kill) unwinds through the `finally` below, which
    # resumes and stops the servers' process groups: the default action would leave them paused.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    figures: Figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            export = Path(tmp) / name / "export"
            raw = build_export(name, export, args.resnet_width)
            threads = (f"threads={args.ort_threads}",) if args.ort_threads else ()
            overrides = {
                "nobatch": ("max_batch_size=1", *threads, *args.serve),
                "batch": (*threads, *args.serve, *args.batch),
            }
            load_bodies = {
                encoding: (bodies(raw, args.requests + 10, encoding), bodies(raw, n_load, encoding))
                for encoding in ENCODINGS
            }
            servers: dict[str, tuple[subprocess.Popen, int]] = {}
            try:
                for side in SIDE_ENCODINGS:  # started one at a time, each paused once healthy
                    port = free_port()
                    if side == "litserve":
                        command = peer_command(export, port, [*overrides["batch"]])
                    else:
                        run_dir = Path(tmp) / name / f"run-{side}"
                        command = serve_command(export, port, run_dir, overrides[side])
                    servers[side] = start(command, port), port
                    pause(servers[side][0], True)
                results = run_rounds(args, servers, load_bodies, export, raw, n_load, name)
            finally:
                for side, (proc, _) in servers.items():
                    stop(proc, signal.SIGKILL if side == "litserve" else signal.SIGTERM)
            figures.update(results)
        headline = "resnet18" if "resnet18" in args.models else args.models[-1]
        figures["headline_model"] = headline
        for key in (
            "batched_vs_litserve",
            "batched_vs_litserve_npy",
            "c1_over_litserve_ms",
            "c1_over_litserve_ms_npy",
        ):
            figures[key] = figures[f"{headline}_{key}"]
    return figures


def run_rounds(
    args: argparse.Namespace,
    servers: dict[str, tuple[subprocess.Popen, int]],
    load_bodies: dict[str, tuple[list[bytes], list[bytes]]],
    export: Path,
    raw: np.ndarray,
    n_load: int,
    name: str,
) -> dict[str, float | int]:
    """The paired concurrency-1 phase, then the concurrency-32 rounds: every side once per round,
    the order rotating between rounds, with ONNX Runtime in-process (batch 16) before the first
    side and after each. Each side is compared with the mean of the in-process runs either side
    of it, and ours with the peer within the same round, so that a change in the shared
    machine's load moves both terms of a ratio alike."""
    c1 = paired_latency(servers, load_bodies, export, raw, args.requests, args.block)
    for (side, encoding), (latencies, failed) in c1.items():
        p50, p99 = percentiles(latencies)
        print(
            f"{name} c1 {side}[{encoding}]: p50 {p50:.2f} ms p99 {p99:.2f} ms over "
            f"{len(latencies)} requests, failed {failed}",
            flush=True,
        )
    local = [in_process(export, raw, n_load)]
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    sides = list(SIDE_ENCODINGS)
    for round_ in range(args.rounds):
        shift = round_ % len(sides)
        for side in sides[shift:] + sides[:shift]:
            proc, port = servers[side]
            pause(proc, False)
            measured = {}
            for encoding in SIDE_ENCODINGS[side]:
                sent = sent_as(side, encoding)
                many = load_bodies[sent][1]
                measured[encoding] = measure(port, proc.pid, many, sent, args.concurrency)
            pause(proc, True)
            local.append(in_process(export, raw, n_load))
            near = {k: (local[-2][k] + local[-1][k]) / 2 for k in local[-1]}
            for encoding, m in measured.items():
                m["over_inproc_b16"] = m["rps"] / near["b16"]
                runs.setdefault((side, encoding), []).append(m)
                print(
                    f"{name} round {round_ + 1} {side}[{encoding}] c{args.concurrency}: "
                    f"{m['rps']:.1f} req/s ({m['over_inproc_b16']:.2f}x in-process b16), "
                    f"failed {m['failed']}; CPU ms/request: worker {m['worker']:.2f}, rest of "
                    f"server {m['rest']:.2f}, client {m['client']:.2f} (in-process: "
                    f"{near['b16_cpu']:.2f} ms/sample at b16); load1 {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    return serving_figures(name, c1, runs, local, args.concurrency)


def serving_figures(
    name: str,
    c1: dict[tuple[str, str], tuple[list[float], int]],
    runs: dict[tuple[str, str], list[dict[str, float]]],
    local: list[dict[str, float]],
    concurrency: int,
) -> dict[str, float | int]:
    """c1: percentiles over every paired block; c32: medians over the rounds, ratios of ours to
    the peer taken within each round first."""
    figures: dict[str, float | int] = {}
    inproc_p50, inproc_p99 = percentiles(c1[("inproc", "array")][0])
    for (side, encoding), (latencies, _) in c1.items():
        if side == "inproc":
            continue
        label = side if encoding == "json" else f"{side}_{encoding}"
        p50, p99 = percentiles(latencies)
        figures[f"{name}_{label}_p50_ms"], figures[f"{name}_{label}_p99_ms"] = p50, p99
        figures[f"{name}_{label}_over_inproc_p50_ms"] = p50 - inproc_p50
    keys = {
        "rps": "rps",
        "over_inproc_b16": "over_inproc_b16_x",
        "worker": "worker_cpu_ms",
        "rest": "rest_cpu_ms",
        "client": "client_cpu_ms",
    }
    for (side, encoding), measured in runs.items():
        label = side if encoding == "json" else f"{side}_{encoding}"
        for key, figure in keys.items():
            figures[f"{name}_{label}_{figure}"] = median([m[key] for m in measured])
    figures[f"{name}_failed"] = int(
        sum(m["failed"] for ms in runs.values() for m in ms)
        + sum(failed for _, failed in c1.values())
    )
    for encoding, suffix in (("json", ""), ("npy", "_npy")):
        ours, peer = runs[("batch", encoding)], runs[("litserve", encoding)]
        ratios = [o["rps"] / p["rps"] for o, p in zip(ours, peer, strict=True)]
        label = "" if encoding == "json" else "_npy"
        gap = figures[f"{name}_batch{label}_p50_ms"] - figures[f"{name}_litserve{label}_p50_ms"]
        figures[f"{name}_batched_vs_litserve{suffix}"] = median(ratios)
        figures[f"{name}_c1_over_litserve_ms{suffix}"] = gap
        print(
            f"{name} ours / LitServe [{encoding}]: c{concurrency} req/s per round "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + f"; c1 p50 ours - LitServe {gap:+.2f} ms",
            flush=True,
        )
    mean = {k: float(np.mean([run[k] for run in local])) for k in local[0]}
    print(
        f"{name} in-process b1 c1: p50 {inproc_p50:.2f} ms p99 {inproc_p99:.2f} ms; samples/s "
        f"batch 16 / batch 1: {mean['b16'] / mean['b1']:.2f}x (mean of {len(local)} runs "
        "between the server sides)",
        flush=True,
    )
    figures[f"{name}_inproc_p50_ms"], figures[f"{name}_inproc_p99_ms"] = inproc_p50, inproc_p99
    figures[f"{name}_inproc_b16_sps"] = mean["b16"]
    figures[f"{name}_inproc_b16_over_b1_x"] = mean["b16"] / mean["b1"]
    figures[f"{name}_inproc_b16_cpu_ms"] = mean["b16_cpu"]
    figures[f"{name}_batching_x"] = figures[f"{name}_batch_rps"] / figures[f"{name}_nobatch_rps"]
    # Targets: our batched server against the LitServe peer (req/s at concurrency 32, p50 at
    # concurrency 1), and against ONNX Runtime in-process at the same batch size, the limit
    # (`{name}_batch_over_inproc_b16_x`); at concurrency 1, batching on must not cost latency
    # against batching off.
    figures[f"{name}_c1_batch_on_over_off_x"] = (
        figures[f"{name}_nobatch_p50_ms"] / figures[f"{name}_batch_p50_ms"]
    )
    return figures


# --- shutdown ----------------------------------------------------------------------------------

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


def sigterm(command: list[str], port: int, body: bytes) -> dict[str, float | int]:
    """One server: started, one request answered, SIGTERM to its main process; what was left."""
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    family: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 180
        while not healthy(port, timeout=2):
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
            "health_after": int(healthy(port, timeout=2)),
        }
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for p in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def run_shutdown(args: argparse.Namespace) -> Figures:
    """SIGTERM to a server's main process: out-of-the-box LitServe vs scripts/serve.py.

    Each server is started in its own session on a free 127.0.0.1 port, answers one request,
    and gets SIGTERM in its main process (what Kubernetes sends to a container's first process).
    Printed per server: the main process's exit code and seconds to exit, how many of its child
    processes are still running 2 s later, and whether /health still answers then. Everything
    left is killed with SIGKILL at the end. Last line: `<stock|serve>_exit_code=..
    <..>_exit_s=.. <..>_children=.. <..>_left=.. <..>_health_after=..`."""
    figures: Figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "export"
        build_export("digits_cnn", export, 16)
        # A file, not `python -c`: LitServe's spawned worker imports the API's module by path.
        script = Path(tmp) / "stock_server.py"
        script.write_text(STOCK)
        port = free_port()
        stock = sigterm([sys.executable, str(script), str(port)], port, b'{"x": 1}')
        port = free_port()
        ours = sigterm(
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
    return figures


# --- peer --------------------------------------------------------------------------------------


class OnnxClassifier(ls.LitAPI):
    def __init__(self, export: str, threads: int, spin: str, **kwargs) -> None:
        super().__init__(**kwargs)
        manifest = json.loads((Path(export) / "manifest.json").read_text())
        self.model_path = str(Path(export) / "model.onnx")
        self.input_name = manifest["input"]["name"]
        self.dtype = manifest["input"]["dtype"]
        self.classes = manifest["output"].get("classes")
        self.threads, self.spin = threads, spin

    def setup(self, device: str) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if self.threads > 0:
            options.intra_op_num_threads = self.threads
        if self.spin == "never":  # the same ONNX Runtime settings as scripts/serve.py's ort_spin
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        elif self.spin == "run":
            options.add_session_config_entry("session.force_spinning_stop", "1")
        self.session = ort.InferenceSession(
            self.model_path, options, providers=["CPUExecutionProvider"]
        )

    def decode_request(self, request):
        if "npy" in request:
            data = base64.b64decode(request["npy"])
            return np.load(io.BytesIO(data), allow_pickle=False).astype(self.dtype, copy=False)
        return np.asarray(request["inputs"], dtype=self.dtype)

    def batch(self, inputs):
        # Each request holds its own samples: one run over all of them, split back by size.
        return np.concatenate(inputs), [len(x) for x in inputs]

    def predict(self, x):
        samples, sizes = x if isinstance(x, tuple) else (x, [len(x)])
        return self.session.run(None, {self.input_name: samples})[0], sizes

    def unbatch(self, output):
        logits, sizes = output
        return np.split(logits, np.cumsum(sizes)[:-1])

    def encode_response(self, output):
        logits = output[0] if isinstance(output, tuple) else output
        z = logits.astype(np.float64)
        z = np.exp(z - z.max(axis=-1, keepdims=True))
        predictions = logits.argmax(-1)
        answer = {
            "predictions": predictions.tolist(),
            "probabilities": (z / z.sum(axis=-1, keepdims=True)).tolist(),
        }
        if self.classes:
            answer["labels"] = [self.classes[int(i)] for i in predictions]
            answer["classes"] = list(self.classes)
        return answer


def peer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--export", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--batch-timeout", type=float, default=0.001)
    parser.add_argument("--spin", default="always")
    parser.add_argument("--fast-queue", action="store_true")


def run_peer(args: argparse.Namespace) -> Figures:
    """The LitServe server `serving` measures scripts/serve.py against (it prints no figures).

    A LitAPI whose `setup` opens an ONNX Runtime session on the export's model.onnx, whose
    `decode_request` turns the JSON body into an array, `batch` / `unbatch` join requests into
    one run and split the answers back, `predict` runs the session and `encode_response` answers
    what scripts/serve.py answers (predictions, probabilities, labels, classes), written the way
    LitServe's documentation shows. The samples arrive as `{"inputs": [<sample>, ...]}`, or as a
    .npy file's bytes, base64-encoded in the JSON body (`{"npy": "<base64>"}`): LitServe reads
    every body that is not a form as JSON, so a binary body travels that way. It checks nothing
    and imports nothing of trainwell; stock LitServe, it leaves its processes running on SIGTERM,
    so the benchmark stops its whole process group with SIGKILL. `--threads`: ONNX Runtime's
    intra-op threads (0: its default)."""
    api = OnnxClassifier(
        args.export,
        args.threads,
        args.spin,
        max_batch_size=args.max_batch_size,
        batch_timeout=args.batch_timeout if args.max_batch_size > 1 else 0.0,
    )
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1, fast_queue=args.fast_queue)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")
    return {}  # not reached: the server runs until it is stopped


# The nets shipped: the digits CNN and the CIFAR-10 ResNet-18, behind CIFAR-10's normalisation.
NETS = ("project.models.digits_cnn", "project.models.resnet", "project.data.cifar10")


PARTS: dict[str, harness.Part] = {
    "export": harness.Part(
        lambda a: "export: export time and samples/s (eager/ORT/pt2)",
        export_arguments,
        run_export,
        needs=NETS,
    ),
    "serving": harness.Part(
        lambda a: "serving: scripts/serve.py vs a LitServe server vs ONNX Runtime in-process",
        serving_arguments,
        run_serving,
        threads=0,
        needs=NETS,
    ),
    "shutdown": harness.Part(
        lambda a: "serving_shutdown: SIGTERM, stock LitServe vs serve.py",
        lambda parser: None,
        run_shutdown,
        threads=0,
        needs=NETS,
    ),
    "peer": harness.Part(
        lambda a: "", peer_arguments, run_peer, threads=0, header=False, needs=NETS
    ),
}


if __name__ == "__main__":
    sys.exit(harness.run_parts(__doc__ or "", PARTS))
