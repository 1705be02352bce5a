"""The peer that benchmarks/serving.py measures scripts/serve.py against: an ONNX model behind
LitServe, written the way LitServe's documentation shows. Benchmark code, not part of trainwell.

    python benchmarks/litserve_peer.py --export <export dir> --port 8001 \\
        --max-batch-size 16 --batch-timeout 0.001 --threads 0 --spin always --fast-queue

A LitAPI whose `setup` opens an ONNX Runtime session on the export's model.onnx, whose
`decode_request` turns the JSON body into an array, `batch` / `unbatch` join requests into one
run and split the answers back, `predict` runs the session and `encode_response` answers what
scripts/serve.py answers (predictions, probabilities, labels, classes). The samples arrive as
`{"inputs": [<sample>, ...]}`, or as a .npy file's bytes, base64-encoded in the JSON body
(`{"npy": "<base64>"}`): LitServe reads every body that is not a form as JSON, so a binary body
travels that way (or as a multipart form, which needs python-multipart). It checks nothing and
imports nothing of trainwell; stock LitServe, it leaves its processes running on SIGTERM, so the
benchmark stops its whole process group with SIGKILL.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
from pathlib import Path

import litserve as ls
import numpy as np


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--export", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--batch-timeout", type=float, default=0.001)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--spin", default="always")
    parser.add_argument("--fast-queue", action="store_true")
    args = parser.parse_args()
    api = OnnxClassifier(
        args.export,
        args.threads,
        args.spin,
        max_batch_size=args.max_batch_size,
        batch_timeout=args.batch_timeout if args.max_batch_size > 1 else 0.0,
    )
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1, fast_queue=args.fast_queue)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main()
