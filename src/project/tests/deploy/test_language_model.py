"""Predict and export a token model (experiment=lm_accum): int64 token ids in, dynamic batch and
sequence length, next-token top-k per sequence out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.scripts import call_script, run_ok
from trainwell.deploy import load_run
from trainwell.deploy.artifact import verify_export
from trainwell.deploy.raw import raw_data

pytestmark = pytest.mark.example(
    "project.data.sequences", "project.models.transformer", "project.tasks.language_model"
)

TINY = (
    "experiment=lm_accum",
    "data.num_sequences=120",
    "data.max_len=16",
    "data.min_len=3",
    "data.batch_size=8",
    "data.num_workers=0",
    "model.net.dim=16",
    "model.net.depth=1",
    "model.net.heads=2",
    "trainer.max_epochs=1",
    "trainer.num_sanity_val_steps=0",
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("lm") / "run"
    run_ok("train.py", run_dir, *TINY)
    return run_dir


def _ckpt(run: Path) -> str:
    return f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"


def _rows(csv: bytes) -> tuple[list[str], list[list[str]]]:
    lines = csv.decode().splitlines()
    return lines[0].split(","), [line.split(",") for line in lines[1:]]


@pytest.fixture(scope="module")
def predictions(run: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    run_ok("predict.py", tmp_path_factory.mktemp("lm_p"), _ckpt(run), "top_k=3")
    return (run / "predictions" / "test.csv").read_bytes()


def test_next_token_top_k_per_sequence_and_the_test_loss_from_the_file(
    run: Path, predictions: bytes
) -> None:
    header, rows = _rows(predictions)
    assert header == [
        "index",
        "prediction",
        "top_1",
        "top_2",
        "top_3",
        "p_top_1",
        "p_top_2",
        "p_top_3",
        "log_likelihood",
        "tokens",
        "target",
    ]
    assert [int(r[0]) for r in rows] == list(range(12))  # 10% of 120 sequences, index order
    for r in rows:
        assert r[1] == r[2] and len({r[2], r[3], r[4]}) == 3
        assert float(r[5]) >= float(r[6]) >= float(r[7])
        assert r[-1] == "2"  # the next token after a sequence's inputs is its <eos>
    loss = -sum(float(r[8]) for r in rows) / sum(int(r[9]) for r in rows)
    test_loss = json.loads((run / "results.json").read_text())["metrics"]["test/loss"]
    assert loss == pytest.approx(test_loss, abs=1e-5)


def test_raw_token_rows_predict_what_the_split_predicts(
    run: Path, predictions: bytes, tmp_path: Path
) -> None:
    loaded = load_run(run / "checkpoints" / "best.ckpt")
    samples, _, _ = raw_data(loaded.datamodule).splits["test"]
    assert samples.dtype == np.int64 and (samples[:, 0] == 1).all()  # each row opens with <bos>
    np.save(tmp_path / "tokens.npy", samples)
    # In-process: the predict script's own subprocess test is the `predictions` fixture.
    proc = call_script(
        "predict.py", _ckpt(run), f"input={tmp_path / 'tokens.npy'}", "top_k=3",
        f"hydra.run.dir={tmp_path / 'p'}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    header, rows = _rows((run / "predictions" / "tokens.csv").read_bytes())
    assert header[-1] == "p_top_3"  # no target on raw input
    _, by_split = _rows(predictions)
    assert [r[:5] for r in rows] == [r[:5] for r in by_split]  # the same top-3 ids
    for r, s in zip(rows, by_split, strict=True):
        assert [float(v) for v in r[5:8]] == pytest.approx([float(v) for v in s[5:8]], abs=2e-6)
    left_padded = samples[:2, ::-1].copy()
    np.save(tmp_path / "left.npy", left_padded)
    proc = call_script(
        "predict.py", _ckpt(run), f"input={tmp_path / 'left.npy'}", f"hydra.run.dir={tmp_path}"
    )
    assert proc.returncode == 2 and "right padding" in proc.stderr.strip().splitlines()[-1]


def test_the_export_takes_any_batch_and_sequence_length_through_onnxruntime(
    run: Path, tmp_path: Path
) -> None:
    proc = run_ok("export.py", tmp_path / "e", _ckpt(run))
    assert "onnxruntime: agreement 1" in proc.stdout
    export = run / "export"
    manifest = verify_export(export)
    assert manifest["input"]["dtype"] == "int64"
    assert manifest["input"]["shape"] == [None, None]
    assert manifest["input"]["dynamic_axes"] == {"0": "batch", "1": "sequence"}
    assert len(manifest["output"]["classes"]) == 32
    parity = manifest["parity"]
    assert parity["samples"] > 12  # compared per real token, not per sequence
    for path in ("onnxruntime", "torch_export"):
        assert parity["paths"][path]["agreement"] == 1.0
        assert parity["paths"][path]["max_abs_diff"] <= 1e-4
    # Two batch sizes and two lengths through ONNX Runtime alone; the eager module gives the
    # reference (a causal model: a prefix's logits do not depend on what follows it).
    loaded = load_run(run / "checkpoints" / "best.ckpt")
    samples, _, _ = raw_data(loaded.datamodule).splits["test"]
    np.save(tmp_path / "tokens.npy", samples)
    script = (
        "import sys, numpy as np, onnxruntime as ort\n"
        f"s = ort.InferenceSession({str(export / 'model.onnx')!r})\n"
        f"x = np.load({str(tmp_path / 'tokens.npy')!r})\n"
        "for n, t in [(1, 3), (5, x.shape[1])]:\n"
        "    out = s.run(None, {'inputs': x[:n, :t]})[0]\n"
        "    assert out.shape == (n, t, 32), out.shape\n"
        f"    np.save({str(tmp_path)!r} + f'/out_{{n}}_{{t}}.npy', out)\n"
        "assert 'torch' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with torch.inference_mode():
        for n, t in [(1, 3), (5, samples.shape[1])]:
            eager = loaded.module(torch.from_numpy(samples[:n, :t])).numpy()
            onnx = np.load(tmp_path / f"out_{n}_{t}.npy")
            assert np.abs(onnx - eager).max() <= 1e-4
            assert (onnx.argmax(-1) == eager.argmax(-1)).all()
