"""`scripts/serve.py artifact=<export dir>`: the exported ONNX graph behind LitServe.

    POST /predict {"inputs": [<raw sample>, ...]}        (or the samples as a .npy body, with
                                                         Content-Type: application/x-npy)
      -> class scores: {"predictions": [int, ...], "probabilities": [[float, ...], ...],
                        "labels": [<class name>, ...], "classes": [<class name>, ...]}  (names
                        when the manifest has them)
         label scores: {"predictions": [[0 | 1 per label], ...], "probabilities": [[...], ...],
                        "labels": [[<predicted label names>], ...], "names": [...]}
         values:       {"predictions": [float, ...] (one output) or [[float, ...], ...],
                        "names": [...]}
         other:        {"outputs": [<each sample's output>, ...]}
       (the manifest's output.kind says which: io/output_kind.py)
    GET /health -> 200 once every inference worker has loaded the model

What the server trusts: every file of the export is checked against manifest.json's sha256 before
anything starts (a changed or missing file: exit 2 naming it), and the inference worker builds its
ONNX Runtime session from bytes it checked again itself; nothing is read through pickle.

Where a request is checked: `ValidateRequests`, an ASGI middleware in the HTTP process, reads the
body (stopping at the size limit), parses it once (deploy/request.py) and checks the samples
against the manifest's input spec (deploy/input_spec.py, the rules predict's `input=` files
meet too). A bad body gets one JSON line and a 4xx there, before it reaches a queue or a worker.
A good one travels on as a small envelope holding the checked array's bytes: LitServe parses the
request body itself, and handing it the user's JSON again would parse every request twice (which
halved the batched throughput of a 32x32x3 model).

SIGTERM (what Kubernetes and SLURM send): LitServe leaves SIGTERM to Python's default, which kills
the main process at once and leaves its HTTP and inference processes serving as orphans. The main
process here turns SIGTERM into LitServe's own interrupt shutdown: the HTTP processes stop
accepting, finish the requests in flight, and every child is joined before the process exits.
"""

from __future__ import annotations

import base64
import json
import signal
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from trainwell import compat
from trainwell.deploy import artifact
from trainwell.deploy.batching import GreedyBatchLoop
from trainwell.deploy.input_spec import InputRefused, InputSpec
from trainwell.deploy.request import (
    NPY,
    BadRequest,
    json_samples,
    not_as_declared,
    npy_samples,
    read_body,
)
from trainwell.deploy.shutdown import reap_children, stop_on_signals
from trainwell.errors import TrainwellError
from trainwell.io.kind_rows import THRESHOLD, sigmoid
from trainwell.io.output_kind import CLASS_SCORES, LABEL_SCORES, VALUES

# The key of the checked batch (bytes of the manifest's dtype) on its way from the middleware to
# a worker.
ENVELOPE = "array_b64"


def softmax(logits: np.ndarray) -> np.ndarray:
    """Class probabilities in float64, as predict.py computes them for predictions.csv."""
    z = logits.astype(np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


class ValidateRequests:
    """ASGI middleware: POST /predict bodies (JSON, or .npy with `Content-Type: application/x-npy`)
    checked against the input spec, answered 4xx with one JSON line when bad; good ones forwarded
    as the envelope the worker decodes."""

    def __init__(self, app: Any, spec: InputSpec, max_bytes: int, path: str = "/predict"):
        self.app, self.spec, self.max_bytes, self.path = app, spec, int(max_bytes), path

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        try:
            body = await read_body(headers, receive, self.max_bytes)
            media_type = _media_type(headers)
            expected = "a .npy array" if media_type == NPY else "JSON"
            # Before any reader: a body that is not what its content type says is named as
            # both, not answered with a reader's complaint about bytes it never expected.
            mismatch = not_as_declared(body, media_type, expected)
            if mismatch is not None:
                raise mismatch
            if media_type == NPY:
                samples = npy_samples(body, self.max_bytes)
            else:  # JSON whatever the header says: `curl -d` sends form-urlencoded
                samples = json_samples(body, self.spec.ndim)
            array = self.spec.check(samples)
        except BadRequest as err:
            await _answer(send, err.status, {"error": str(err)})
            return
        except InputRefused as err:
            await _answer(send, 400, {"error": str(err)})
            return
        envelope = json.dumps(
            {ENVELOPE: base64.b64encode(array.tobytes()).decode(), "shape": list(array.shape)}
        ).encode()
        headers = [
            (k, v) for k, v in scope["headers"] if k not in (b"content-length", b"content-type")
        ]
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(envelope)),
        ]
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if sent:  # the body was consumed: what follows is the client's disconnect
                return await receive()
            sent = True
            return {"type": "http.request", "body": envelope, "more_body": False}

        await self.app({**scope, "headers": headers}, replay, send)


def _media_type(headers: dict[bytes, bytes]) -> str:
    """`application/x-npy` of `Content-Type: application/x-npy; charset=...`, lower case."""
    value = headers.get(b"content-type", b"").decode("latin-1")
    return value.split(";", 1)[0].strip().lower()


async def _answer(send: Any, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _lit_api_base() -> type:
    import litserve as ls

    return ls.LitAPI


class OnnxAPI(_lit_api_base()):  # type: ignore[misc]
    """One inference worker: an ONNX Runtime session over the export's model.onnx.

    Pickled into each worker by LitServe (spawn): it carries only the export's path, the manifest's
    sha256 for model.onnx and plain settings, never the model itself.
    """

    def __init__(
        self,
        export_dir: Path,
        manifest: dict[str, Any],
        threads: int,
        spin: str = "always",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.export_dir = Path(export_dir)
        self.onnx_sha256 = manifest["files"][artifact.ONNX]["sha256"]
        self.input_name = manifest["input"]["name"]
        self.dtype = manifest["input"]["dtype"]
        output = manifest.get("output") or {}
        self.classes = output.get("classes")
        # An export without a kind is one written before kinds were declared: class scores.
        self.kind = str(output.get("kind") or CLASS_SCORES)
        self.names = output.get("names")
        self.threads = int(threads)
        self.spin = str(spin)

    def setup(self, device: str) -> None:
        import hashlib

        import onnxruntime as ort

        data = (self.export_dir / artifact.ONNX).read_bytes()
        # Checked again here, on the bytes the session is built from: the file could have changed
        # between the main process's check and this worker's start.
        if hashlib.sha256(data).hexdigest() != self.onnx_sha256:
            raise TrainwellError(f"{self.export_dir / artifact.ONNX} changed after it was verified")
        # Ctrl-C reaches every process of the terminal's group: the main process stops and joins
        # this worker; left to Python's default, the worker dies of a KeyboardInterrupt traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        options = ort.SessionOptions()
        if self.threads > 0:
            options.intra_op_num_threads = self.threads
        # ONNX Runtime's threads busy-wait for 10-20 ms after each run by default, on the cores
        # the HTTP process needs to parse the next request. "run": they spin within a run (fast
        # hand-offs between operators) and stop when it ends; a small model then served 1.3-1.5x
        # the requests/s at concurrency 32 on 2 cores, a resnet18 batched ~20% fewer
        # (docs/benchmarks.md).
        if self.spin == "never":
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        elif self.spin == "run":
            options.add_session_config_entry("session.force_spinning_stop", "1")
        self.session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])

    # No annotation on `request`: LitServe reads it to choose how the endpoint receives the body
    # (none: the JSON as a dict; `Any` would make FastAPI expect a query parameter).
    def decode_request(self, request) -> np.ndarray:
        raw = base64.b64decode(request[ENVELOPE])
        return np.frombuffer(raw, dtype=self.dtype).reshape(request["shape"])

    def batch(self, inputs: list[np.ndarray]) -> tuple[np.ndarray, list[int]]:
        # A request may hold several samples: the batch is their concatenation, and the sizes
        # split the answers back per request, in order.
        return np.concatenate(inputs), [len(x) for x in inputs]

    def predict(self, x: Any) -> tuple[np.ndarray, list[int]]:
        array, sizes = x if isinstance(x, tuple) else (x, [len(x)])
        return self.session.run(None, {self.input_name: array})[0], sizes

    def unbatch(self, output: tuple[np.ndarray, list[int]]) -> list[np.ndarray]:
        logits, sizes = output
        return np.split(logits, np.cumsum(sizes)[:-1])

    def encode_response(self, output: Any) -> dict[str, Any]:
        logits = output[0] if isinstance(output, tuple) else output
        if self.kind != CLASS_SCORES:
            return kind_answer(logits, self.kind, self.names)
        predictions = logits.argmax(-1)
        answer: dict[str, Any] = {
            "predictions": predictions.tolist(),
            "probabilities": softmax(logits).tolist(),
        }
        if self.classes:
            answer["labels"] = [self.classes[int(i)] for i in predictions]
            answer["classes"] = list(self.classes)
        return answer


def kind_answer(outputs: np.ndarray, kind: str, names: list[str] | None) -> dict[str, Any]:
    """The answer for outputs that are not class scores, with the fields that fit the kind (as
    predict.py's columns: io/kind_rows.py)."""
    if kind == LABEL_SCORES:
        probs = sigmoid(outputs)
        chosen = probs >= THRESHOLD
        answer: dict[str, Any] = {
            "predictions": chosen.astype(int).tolist(),
            "probabilities": probs.tolist(),
        }
        if names:
            answer["labels"] = [
                [n for n, on in zip(names, row, strict=True) if on] for row in chosen
            ]
            answer["names"] = list(names)
        return answer
    if kind == VALUES:
        single = outputs.ndim == 1 or outputs.shape[1] == 1
        answer = {"predictions": (outputs.reshape(len(outputs)) if single else outputs).tolist()}
        if names:
            answer["names"] = list(names)
        return answer
    return {"outputs": outputs.tolist()}


def build_server(export_dir: Path, manifest: dict[str, Any], cfg: DictConfig) -> Any:
    import litserve as ls

    spec = InputSpec.from_manifest(manifest)
    max_batch = int(cfg.max_batch_size)
    if any(size is None for size in spec.shape[1:]) and max_batch > 1:
        # Requests of different lengths cannot be stacked into one batch.
        print("serve: the input has a dynamic axis besides the batch: batching off", flush=True)
        max_batch = 1
    batching = max_batch > 1
    api = OnnxAPI(
        export_dir,
        manifest,
        threads=int(cfg.threads),
        spin=str(cfg.ort_spin),
        max_batch_size=max_batch,
        batch_timeout=float(cfg.batch_timeout) if batching else 0.0,
        loop=GreedyBatchLoop() if batching else "auto",
    )
    server = ls.LitServer(
        api,
        accelerator="cpu",
        devices=1,
        workers_per_device=int(cfg.workers),
        fast_queue=bool(cfg.fast_queue),
        middlewares=[(ValidateRequests, {"spec": spec, "max_bytes": int(cfg.max_body_bytes)})],
    )
    compat.set_litserve_drain_timeout(server, float(cfg.drain_timeout))
    return server


def serve(cfg: DictConfig) -> int:
    """Verify the export, then serve it until SIGTERM / SIGINT."""
    export_dir, manifest = artifact.served_export(cfg)
    server = build_server(export_dir, manifest, cfg)
    print(f"serving: {export_dir} on http://{cfg.host}:{int(cfg.port)}", flush=True)
    stopped_by = stop_on_signals()
    server.run(
        host=str(cfg.host),
        port=int(cfg.port),
        generate_client_file=False,
        log_level=str(cfg.log_level),
    )
    reap_children()
    # Python puts back the default action of every signal it handled as it exits: a second
    # SIGTERM arriving then would kill the stopped server (exit -15). Ignored ones stay ignored.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(f"serve: stopped by {stopped_by[0] if stopped_by else 'LitServe'}", flush=True)
    return 0
