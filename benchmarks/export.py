"""Export time and inference throughput of the three deployable forms of a net.

    .venv/bin/python benchmarks/export.py                       # digits_cnn and resnet18 (width 16)
    .venv/bin/python benchmarks/export.py --resnet-width 64 --reps 5

For `digits_cnn` (raw float 8x8 digits) and `resnet18` (raw uint8 32x32x3 images), each net behind
its raw-input preprocessing (deploy/raw.py's graph form) is exported once per repetition through
trainwell.deploy.export's path (torch.export, then ONNX opset 18) and timed; then samples/s at
batch 1 and batch 256 through eager PyTorch under inference_mode, ONNX Runtime (CPU) and the
torch.export program, the three sides interleaved. Weights are untrained: speed does not depend
on them. Last lines: per model and batch, samples/s of each side, ratios to eager and the fastest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import harness
import numpy as np
import torch
from torch import nn

# Only the batch axis is dynamic for both nets (what export_checkpoint gives an image model).
BATCH_ONLY = {"dynamic_axes": {"0": "batch"}}


def models(resnet_width: int) -> dict[str, tuple[nn.Module, np.ndarray]]:
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="per side, batch and rep")
    parser.add_argument("--resnet-width", type=int, default=16)
    args = harness.parse_args(parser, argv, "export: export time and samples/s (eager/ORT/pt2)")
    import onnxruntime as ort

    from trainwell.deploy.export import _export_graphs

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(torch.get_num_threads(), 1)
    for name, (model, raw) in models(args.resnet_width).items():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            times = []
            for _ in range(args.reps):
                start = time.perf_counter()
                _export_graphs(model, torch.from_numpy(raw[:4]), out, BATCH_ONLY)
                times.append(time.perf_counter() - start)
            print(harness.describe(f"{name} export_s", times, "s"), flush=True)
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
                    print(harness.describe(f"{name} b{batch} {side}", values, " samples/s"))
                ratios = " ".join(f"{side}/eager={med[side] / med['eager']:.2f}" for side in med)
                best = max(med, key=med.get)
                print(f"{name} batch={batch}: {ratios} fastest={best}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
