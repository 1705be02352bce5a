"""scripts/serve.py as a real process on a free localhost port, over a tiny export (no training):
answers equal ONNX Runtime in-process, bad requests are one 4xx line and the server keeps serving,
a tampered export never starts, and SIGTERM drains requests in flight and leaves no process."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from tests.helpers.config import REPO
from tests.helpers.serving import (
    STARTUP_TIMEOUT_S,
    free_port,
    listening,
    serve_command,
    server_errors,
    start_server,
    stop_group,
    tiny_export,
)
from trainwell.deploy.artifact import newest_export
from trainwell.deploy.serve import OnnxAPI
from trainwell.errors import TrainwellError

LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_export(tmp_path_factory.mktemp("tiny") / "export")


@pytest.fixture(scope="module")
def served(export: Path, tmp_path_factory: pytest.TempPathFactory):
    # A 50 ms batch window: concurrent requests of the tests below are run as one batch.
    run_dir = tmp_path_factory.mktemp("serve") / "run"
    proc, url = start_server(export, run_dir, f"max_body_bytes={LIMIT}", "batch_timeout=0.05")
    try:
        yield proc, url
    finally:
        stop_group(proc)


@pytest.fixture
def server(served: tuple[subprocess.Popen, str]) -> str:
    return served[1]


def test_it_listens_on_localhost_only(served: tuple[subprocess.Popen, str]) -> None:
    main = psutil.Process(served[0].pid)
    listening = {
        conn.laddr.ip
        for process in [main, *main.children(recursive=True)]
        for conn in process.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }
    assert listening == {"127.0.0.1"}


def samples(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 17, size=(n, 8, 8)).astype(np.float32)


def expected(export: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(export / "model.onnx"), providers=["CPUExecutionProvider"])
    logits = np.concatenate([session.run(None, {"inputs": s[None]})[0] for s in x])
    # Written out here, not the server's softmax: a bug there would be on both sides.
    e = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def ask(url: str, x: np.ndarray) -> dict:
    answer = httpx.post(f"{url}/predict", json={"inputs": x.tolist()}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def check_answer(answer: dict, want: np.ndarray) -> None:
    assert answer["predictions"] == want.argmax(-1).tolist()
    np.testing.assert_allclose(answer["probabilities"], want, rtol=0, atol=1e-6)
    assert answer["labels"] == [f"c{i}" for i in want.argmax(-1)]
    assert answer["classes"] == [f"c{i}" for i in range(10)]


def test_health_and_a_batch_answered_as_onnxruntime_in_process(server: str, export: Path) -> None:
    assert httpx.get(f"{server}/health", timeout=10).status_code == 200
    x = samples(5, seed=1)
    check_answer(ask(server, x), expected(export, x))


def test_concurrent_requests_of_different_sizes_each_get_their_own_answers(
    server: str, export: Path
) -> None:
    # Dynamic batching concatenates requests; each answer must be its own request's samples.
    requests = [samples(1 + i % 4, seed=10 + i) for i in range(24)]
    answers: list[dict | None] = [None] * len(requests)

    def send(i: int) -> None:
        answers[i] = ask(server, requests[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for x, answer in zip(requests, answers, strict=True):
        assert answer is not None
        check_answer(answer, expected(export, x))


def test_requests_batched_together_each_get_the_answers_for_their_own_samples(
    export: Path,
) -> None:
    # Whether concurrent HTTP requests meet in one batch depends on timing (a request that finds
    # the worker idle runs alone); here requests of different sizes are batched as the worker
    # batches them, every time.
    manifest = json.loads((export / "manifest.json").read_text())
    api = OnnxAPI(export, manifest, threads=1)
    handler = signal.getsignal(signal.SIGINT)
    try:
        api.setup("cpu")
    finally:
        signal.signal(signal.SIGINT, handler)  # setup() ignores Ctrl-C, as a worker must
    requests = [samples(n, seed=30 + n) for n in (1, 3, 2)]
    answers = api.unbatch(api.predict(api.batch(requests)))
    assert len(answers) == len(requests)
    for x, logits in zip(requests, answers, strict=True):
        check_answer(api.encode_response(logits), expected(export, x))


@pytest.mark.parametrize(
    ("spin", "entries"),
    [
        ("always", {}),
        ("run", {"session.force_spinning_stop": "1"}),
        ("never", {"session.intra_op.allow_spinning": "0"}),
    ],
)
def test_ort_spin_reaches_the_workers_session(
    export: Path, spin: str, entries: dict[str, str]
) -> None:
    manifest = json.loads((export / "manifest.json").read_text())
    api = OnnxAPI(export, manifest, threads=2, spin=spin)
    handler = signal.getsignal(signal.SIGINT)
    try:
        api.setup("cpu")
    finally:
        signal.signal(signal.SIGINT, handler)
    options = api.session.get_session_options()
    for key in ("session.force_spinning_stop", "session.intra_op.allow_spinning"):
        if key in entries:
            assert options.get_session_config_entry(key) == entries[key], key
        else:  # not set: ONNX Runtime's default (spinning on, not stopped after a run)
            with pytest.raises(RuntimeError, match="does not have configuration"):
                options.get_session_config_entry(key)


GOOD = samples(1, seed=2)


def _with(value: object) -> bytes:
    bad = GOOD.tolist()
    bad[0][3][4] = value
    return json.dumps({"inputs": bad}).encode()


BAD = {
    "malformed JSON": (b'{"inputs": [[[1.0,', 400),
    "not an object": (b"[1, 2, 3]", 400),
    "missing inputs": (json.dumps({"input": GOOD.tolist()}).encode(), 400),
    "empty list": (b'{"inputs": []}', 400),
    "wrong shape": (json.dumps({"inputs": GOOD[:, :7].tolist()}).encode(), 400),
    "ragged": (json.dumps({"inputs": [GOOD[0].tolist(), GOOD[0, :7].tolist()]}).encode(), 400),
    "a string": (_with("3"), 400),
    "a boolean": (_with(True), 400),
    "a null": (_with(None), 400),
    "NaN": (_with(float("nan")), 400),
    "Infinity": (_with(float("inf")), 400),
    "above range": (_with(16.5), 400),
    "below range": (_with(-0.5), 400),
    "over the size limit": (json.dumps({"inputs": samples(200, 3).tolist()}).encode(), 413),
    "not UTF-8": (b'{"inputs": "\xff"}', 400),
}


@pytest.mark.parametrize("kind", list(BAD))
def test_a_bad_request_is_one_json_4xx_line_and_the_next_good_one_is_answered(
    server: str, export: Path, kind: str
) -> None:
    body, status = BAD[kind]
    answer = httpx.post(
        f"{server}/predict", content=body, headers={"content-type": "application/json"}, timeout=60
    )
    assert answer.status_code == status, answer.text
    assert "\n" not in answer.text.strip()
    error = answer.json()["error"]
    assert isinstance(error, str) and error and "Traceback" not in error
    check_answer(ask(server, GOOD), expected(export, GOOD))


def npy_body(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def test_a_npy_body_is_answered_as_the_same_samples_in_json(server: str, export: Path) -> None:
    x = samples(3, seed=4)
    for array, kind in [(x, "application/x-npy"), (x.astype(np.float64), "Application/X-NPY; v=1")]:
        answer = httpx.post(
            f"{server}/predict", content=npy_body(array), headers={"content-type": kind}, timeout=60
        )
        assert answer.status_code == 200, answer.text
        check_answer(answer.json(), expected(export, x))
        assert answer.json() == ask(server, x)


NPY_BAD = {
    "pickled objects": npy_body(np.array([{"inputs": 1}], dtype=object), allow_pickle=True),
    "not a .npy": b'{"inputs": [[0]]}',
    "booleans": npy_body(np.ones((1, 8, 8), dtype=bool)),
    "wrong shape": npy_body(np.ones((1, 64), dtype=np.float32)),
    "above range": npy_body(np.full((1, 8, 8), 17.0, dtype=np.float32)),
    "1e39 as float64": npy_body(np.full((1, 8, 8), 1e39)),
}


@pytest.mark.parametrize("kind", list(NPY_BAD))
def test_a_bad_npy_body_is_one_json_4xx_line(server: str, export: Path, kind: str) -> None:
    answer = httpx.post(
        f"{server}/predict",
        content=NPY_BAD[kind],
        headers={"content-type": "application/x-npy"},
        timeout=60,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert isinstance(error, str) and error and "\n" not in error and "Traceback" not in error
    check_answer(ask(server, GOOD), expected(export, GOOD))


def npy_header_only(shape: tuple[int, ...]) -> bytes:
    """A .npy header declaring `shape` of float32, followed by a few bytes: what an attacker
    sends to make a reader allocate the declared array."""
    buffer = io.BytesIO()
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + b"\0" * 256


def npz_body() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, inputs=samples(1, seed=0))
    return buffer.getvalue()


# (body, content type, status, what the one line names)
NOT_AS_DECLARED = {
    "npz as npy": (npz_body(), "application/x-npy", ".npz archive", "application/x-npy"),
    "json as npy": (b'{"inputs": [[0]]}', "application/x-npy", "JSON", "application/x-npy"),
    "npy as json": (npy_body(samples(1, seed=0)), "application/json", ".npy", "application/json"),
    "npz as json": (npz_body(), "application/json", ".npz archive", "application/json"),
}


@pytest.mark.parametrize("case", list(NOT_AS_DECLARED))
def test_a_body_that_is_not_what_its_content_type_says_is_a_400_naming_both(
    server: str, export: Path, case: str
) -> None:
    body, kind, found, declared = NOT_AS_DECLARED[case]
    answer = httpx.post(
        f"{server}/predict", content=body, headers={"content-type": kind}, timeout=60
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert found in error and declared in error and "\n" not in error, error
    assert "pickle" not in error  # numpy's advice for files on disk, not for a request
    check_answer(ask(server, GOOD), expected(export, GOOD))


def test_a_npy_header_declaring_a_huge_array_is_a_413_before_any_allocation(
    served: tuple[subprocess.Popen, str], export: Path
) -> None:
    proc, server = served
    # 1e9 x 8 x 8 float32 is 256 GB: numpy would allocate it before finding the body short.
    rss = [p.memory_info().rss for p in psutil.Process(proc.pid).children(recursive=True)]
    answer = httpx.post(
        f"{server}/predict",
        content=npy_header_only((10**9, 8, 8)),
        headers={"content-type": "application/x-npy"},
        timeout=60,
    )
    assert answer.status_code == 413, answer.text
    error = answer.json()["error"]
    assert "[1000000000, 8, 8]" in error and f"limit of {LIMIT}" in error, error
    # Under the limit but longer than the body: a 400 naming both sizes, nothing allocated.
    short = httpx.post(
        f"{server}/predict",
        content=npy_header_only((20, 8, 8)),
        headers={"content-type": "application/x-npy"},
        timeout=60,
    )
    assert short.status_code == 400 and "holds 256 bytes" in short.json()["error"], short.text
    after = [p.memory_info().rss for p in psutil.Process(proc.pid).children(recursive=True)]
    assert max(after) < max(rss) + (64 << 20)  # no process grew by the declared array
    check_answer(ask(server, GOOD), expected(export, GOOD))


def test_a_body_without_a_declared_length_stops_at_the_limit(server: str, export: Path) -> None:
    def chunks():
        yield b'{"inputs": ['
        for _ in range(LIMIT // 100):
            yield b"[" + b"1.0, " * 24 + b"1.0],"
        yield b"[]]}"

    answer = httpx.post(f"{server}/predict", content=chunks(), timeout=60)
    assert answer.status_code == 413 and "limit" in answer.json()["error"]
    check_answer(ask(server, GOOD), expected(export, GOOD))


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_a_tampered_or_missing_file_exits_2_naming_it_before_any_server(
    export: Path, tmp_path: Path, damage: str
) -> None:
    copy = tmp_path / "export"
    shutil.copytree(export, copy)
    target = copy / "weights.npy"
    if damage == "changed":
        data = bytearray(target.read_bytes())
        data[-1] ^= 1
        target.write_bytes(bytes(data))
    else:
        target.unlink()
    port, run_dir = free_port(), tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / "server.out", "w") as out, open(run_dir / "server.err", "w") as err:
        proc = subprocess.Popen(
            serve_command(copy, port, run_dir=run_dir),
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    try:
        # Refusing takes seconds; a server that started on the damaged export never exits: the
        # wait ends as soon as its port answers.
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not listening(port):
            time.sleep(0.2)
    finally:
        stop_group(proc)
    out, err = (run_dir / "server.out").read_text(), (run_dir / "server.err").read_text()
    assert proc.returncode == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "weights.npy" in lines[0], err
    assert "serving:" not in out


def test_a_worker_refuses_an_onnx_file_changed_after_the_check(export: Path) -> None:
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["files"]["model.onnx"]["sha256"] = "0" * 64
    api = OnnxAPI(export, manifest, threads=1)
    with pytest.raises(TrainwellError, match="changed after it was verified"):
        api.setup("cpu")


def test_sigterm_finishes_the_request_in_flight_and_leaves_no_process(
    export: Path, tmp_path: Path
) -> None:
    proc, url = start_server(export, tmp_path / "run")
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        assert len(family) > 1  # HTTP and inference processes exist to be left behind
        # The request is on the wire before SIGTERM, sent by hand so that nothing in the client
        # can delay it; its last byte is held back until after SIGTERM, so the request is still
        # inside the server (being read) when the server is told to stop.
        body = json.dumps({"inputs": GOOD.tolist()}).encode()
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(
                b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body[:-1])
            )
            time.sleep(1.0)
            os.kill(proc.pid, signal.SIGTERM)
            time.sleep(1.0)
            conn.sendall(body[-1:])
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        # A bound, not a timing figure: the server promises to exit within 10 s.
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, f"exit code {code}: {server_errors(tmp_path / 'run')}"
        assert "Traceback" not in server_errors(tmp_path / "run")  # every process stopped cleanly
        out = (tmp_path / "run" / "server.out").read_text().strip().splitlines()
        assert out[-1] == "serve: stopped by SIGTERM"
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), answer[:500]
        check_answer(json.loads(payload), expected(export, GOOD))
        # A helper process may still be ending on its own when the server has exited (Python's
        # resource tracker exits once its last client has): wait a bounded while for each, so that
        # only a process that stays alive counts as left behind.
        _, alive = psutil.wait_procs(family, timeout=5)
        left = [_described(p) for p in alive if _not_a_zombie(p)]
        assert not left, f"processes left after SIGTERM: {left}"
    finally:
        stop_group(proc)


def test_latest_is_the_export_whose_manifest_was_written_last(tmp_path: Path) -> None:
    older = tiny_export(tmp_path / "logs" / "train" / "runs" / "b" / "export")
    newer = tiny_export(tmp_path / "logs" / "train" / "runs" / "a" / "export", seed=1)
    os.utime(older / "manifest.json", (1e9, 1e9))
    assert newest_export(tmp_path / "logs") == newer
    (tmp_path / "logs" / "train" / "runs" / "c" / "export").mkdir(parents=True)  # interrupted
    assert newest_export(tmp_path / "logs") == newer
    with pytest.raises(TrainwellError, match="no export under"):
        newest_export(tmp_path / "empty")


def _as_the_readme_writes_it(export: Path, port: int, cwd: Path) -> subprocess.Popen:
    """scripts/serve.py artifact=<export> port=<port>: nothing added (no hydra.run.dir=), in a
    directory of its own, in its own process group as a terminal's foreground job is."""
    return subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "serve.py"), f"artifact={export}", f"port={port}"],
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _pending(pid: int) -> int:
    """The signals pending for process `pid` as a whole (a bit per signal, /proc's ShdPnd)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no ShdPnd in /proc/{pid}/status")


def test_the_readme_line_serves_and_ctrl_c_stops_it_with_one_line(
    export: Path, tmp_path: Path
) -> None:
    port = free_port()
    proc = _as_the_readme_writes_it(export, port, tmp_path)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        # Two signals sent back to back can be taken by two threads in either order: the second
        # is sent once the kernel has handed the first to the server (no longer pending), and a
        # moment later: on a busy machine the thread that took it can wait that long to run its
        # handler, and SIGTERM, taken meanwhile by the main thread, would be handled first. The
        # drain that the second signal must land in lasts far longer.
        while _pending(proc.pid) & (1 << (signal.SIGINT - 1)) and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)
        # A second signal at once, while LitServe drains, as `make serve` sends (make passes its
        # own SIGTERM on to the server) or a second Ctrl-C: the shutdown goes on, no traceback.
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        stop_group(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert out.strip().splitlines()[-1] == "serve: stopped by SIGINT"


@pytest.mark.slow  # the docs/shipping.md line itself is started (and stopped) in the default suite
def test_a_startup_mistake_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = _as_the_readme_writes_it(tmp_path / "nothing", free_port(), tmp_path)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: export directory not found"), err


def _not_a_zombie(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _described(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:200]}"
    except psutil.Error:
        return str(process.pid)
