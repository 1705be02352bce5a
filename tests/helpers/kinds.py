"""Checks shared by the tests of outputs that are not class scores (values, label scores): the
module's own prediction as reference, and an exported graph run where nothing of the project
can be imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

# Run with `python -I` from an empty directory: no PYTHONPATH, no user site, no repo on the path.
BARE_ONNX = """
import sys
import numpy as np
import onnxruntime as ort
inputs = np.load(sys.argv[2])
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
np.save(sys.argv[3], session.run(None, {session.get_inputs()[0].name: inputs})[0])
mine = sorted({m.split(".")[0] for m in sys.modules} & {"trainwell", "project", "tests", "torch"})
print("imported:", mine)
"""


def onnx_in_a_bare_process(onnx_path: Path, inputs: np.ndarray, scratch: Path) -> np.ndarray:
    """The ONNX graph's outputs on `inputs`, computed by onnxruntime in a process that imports
    nothing of the project (nor torch), which it proves by printing what it imported."""
    scratch.mkdir(parents=True, exist_ok=True)
    np.save(scratch / "inputs.npy", inputs)
    proc = subprocess.run(
        [sys.executable, "-I", "-c", BARE_ONNX, str(onnx_path), "inputs.npy", "outputs.npy"],
        cwd=scratch,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "imported: []" in proc.stdout, proc.stdout
    return np.load(scratch / "outputs.npy")


def reference_predictions(run_dir: Path, split: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """(dataset index, the module's prediction) over `split`, each batch as its loader yields it:
    predict_step(batch, i) where the module defines one, else forward(batch[0]); float32."""
    import lightning as L

    from trainwell.deploy.loading import load_run
    from trainwell.deploy.raw import raw_data

    run = load_run(run_dir / "checkpoints" / "best.ckpt")
    module = run.module
    own_step = type(module).predict_step is not L.LightningModule.predict_step
    outs = []
    with torch.inference_mode():
        loader = getattr(run.datamodule, f"{split}_dataloader")()
        for i, batch in enumerate(loader):
            out = module.predict_step(batch, i) if own_step else module(batch[0])
            outs.append(out.float().numpy())
    index = raw_data(run.datamodule, split).splits[split][1]
    return index, np.concatenate(outs)


def raw_inputs(run_dir: Path, split: str = "test") -> np.ndarray:
    """The split's raw samples (the raw form's), in loader order."""
    from trainwell.deploy.loading import load_run
    from trainwell.deploy.raw import raw_data

    run = load_run(run_dir / "checkpoints" / "best.ckpt")
    return raw_data(run.datamodule, split).splits[split][0]


def read_csv(path: Path) -> tuple[list[str], np.ndarray]:
    header, *rows = path.read_text().splitlines()
    return header.split(","), np.array([[float(c) for c in row.split(",")] for row in rows])


def manifest_output(export_dir: Path) -> dict:
    return json.loads((export_dir / "manifest.json").read_text())["output"]
