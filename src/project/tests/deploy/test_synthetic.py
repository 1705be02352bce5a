"""Predict and export on data=synthetic with model=mlp: raw float images, no preprocessing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from project.data.synthetic import SyntheticDataModule, make_synthetic
from tests.helpers.scripts import run_ok
from trainwell.deploy.artifact import verify_export
from trainwell.deploy.raw import raw_data

pytestmark = pytest.mark.example("project.data.synthetic")

TINY = (
    "model=mlp",
    "data=synthetic",
    "data.num_samples=64",
    "data.num_val=16",
    "data.num_test=20",
    "data.batch_size=16",
    "data.num_workers=0",
    "trainer.accelerator=cpu",
    "trainer.max_epochs=1",
    "trainer.num_sanity_val_steps=0",
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("synthetic") / "run"
    run_ok("train.py", run_dir, *TINY)
    return run_dir


def _ckpt(run: Path) -> str:
    return f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"


@pytest.mark.slow  # predict and export with parity on two data paths
def test_synthetic_mlp_predicts_and_exports_raw_float_images(run: Path, tmp_path: Path) -> None:
    run_ok("predict.py", tmp_path / "p", _ckpt(run))
    lines = (run / "predictions" / "test.csv").read_text().splitlines()
    rows = [line.split(",") for line in lines[1:]]
    assert [int(r[0]) for r in rows] == list(range(80, 100))  # after 64 train + 16 val samples
    accuracy = sum(r[1] == r[-1] for r in rows) / len(rows)
    test_acc = json.loads((run / "results.json").read_text())["metrics"]["test/acc"]
    assert accuracy == pytest.approx(test_acc, abs=1e-6)

    images = make_synthetic(100, 10, 42, 1.0)[80:][0].numpy()
    np.save(tmp_path / "raw.npy", images)
    run_ok("predict.py", tmp_path / "p2", _ckpt(run), f"input={tmp_path / 'raw.npy'}")
    by_file = [
        line.split(",") for line in (run / "predictions" / "raw.csv").read_text().splitlines()[1:]
    ]
    assert [r[1:] for r in by_file] == [r[1:-1] for r in rows]  # same predictions, no target

    run_ok("export.py", tmp_path / "e", _ckpt(run))
    manifest = verify_export(run / "export")
    assert manifest["input"]["dtype"] == "float32"
    assert manifest["input"]["shape"] == [None, 3, 32, 32]
    assert "make_synthetic" in manifest["input"]["description"]
    for path in ("onnxruntime", "torch_export"):
        assert manifest["parity"]["paths"][path]["agreement"] == 1.0
        assert manifest["parity"]["paths"][path]["max_abs_diff"] <= 1e-4


@pytest.mark.parametrize("on_device", [False, True])
def test_the_raw_graph_input_is_what_evaluation_sees_bit_for_bit(on_device: bool) -> None:
    """Float images (identity) or, on the device, uint8 HWC through the quantisation's inverse."""
    dm = SyntheticDataModule(
        num_samples=32, num_val=8, num_test=12, batch_size=8, seed=3, on_device=on_device
    )
    dm.setup("test")
    raw = raw_data(dm)
    samples, index, targets = raw.splits["test"]
    assert samples.dtype == (np.uint8 if on_device else np.float32)
    assert index.tolist() == list(range(40, 52))
    x, y = next(iter(dm.test_dataloader()))
    assert torch.equal(raw.preprocess(torch.from_numpy(samples[:8])), x)
    assert y.tolist() == targets[:8].tolist()
