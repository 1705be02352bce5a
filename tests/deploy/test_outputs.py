"""Where predict and export write: nothing replaced without a word, no empty run dirs left."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.helpers.serving import tiny_export
from trainwell.deploy.export import name_dynamic_axes
from trainwell.deploy.outputs import (
    check_export_target,
    drop_empty_run_dir,
    prediction_path,
)
from trainwell.errors import TrainwellError


def test_a_prediction_file_is_named_after_its_data_and_never_replaced_without_the_flag(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    assert prediction_path(run, "test", None, False) == run / "predictions" / "test.csv"
    mine = prediction_path(run, "test", "data/my.samples.npy", False)
    assert mine == run / "predictions" / "my.samples.csv"
    mine.parent.mkdir(parents=True)
    mine.write_text("kept\n")
    with pytest.raises(TrainwellError, match=r"my\.samples\.csv exists.*overwrite=true") as err:
        prediction_path(run, "val", "other/my.samples.npy", False)
    assert "\n" not in str(err.value)
    assert prediction_path(run, "val", "other/my.samples.npy", True) == mine
    assert mine.read_text() == "kept\n"


def test_only_the_same_checkpoint_replaces_an_export_without_the_flag(tmp_path: Path) -> None:
    export = tiny_export(tmp_path / "run" / "export")
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["source_checkpoint"] = {"path": "/runs/a/checkpoints/best.ckpt", "sha256": "a" * 64}
    (export / "manifest.json").write_text(json.dumps(manifest))
    check_export_target(export, "a" * 64, overwrite=False)
    with pytest.raises(TrainwellError, match=r"export of /runs/a/checkpoints/best\.ckpt"):
        check_export_target(export, "b" * 64, overwrite=False)
    check_export_target(export, "b" * 64, overwrite=True)
    check_export_target(tmp_path / "none", "b" * 64, overwrite=False)
    (export / "manifest.json").unlink()  # an export of unknown origin is not replaced either
    with pytest.raises(TrainwellError, match="overwrite=true"):
        check_export_target(export, "a" * 64, overwrite=False)


def test_an_empty_run_dir_of_predict_or_export_is_removed_and_nothing_else(tmp_path: Path) -> None:
    layout = tmp_path / "logs" / "predict" / "runs" / "2026-01-01_000000_1"
    layout.mkdir(parents=True)
    drop_empty_run_dir(layout)
    assert not (tmp_path / "logs" / "predict").exists() and (tmp_path / "logs").is_dir()
    kept = tmp_path / "logs" / "export" / "runs" / "b"
    kept.mkdir(parents=True)
    (kept / "error.log").write_text("a crash\n")
    drop_empty_run_dir(kept)
    assert (kept / "error.log").is_file()
    mine = tmp_path / "chosen" / "by" / "me"  # hydra.run.dir=: only the dir itself goes
    mine.mkdir(parents=True)
    drop_empty_run_dir(mine)
    assert not mine.exists() and (tmp_path / "chosen" / "by").is_dir()


def test_the_onnx_axes_carry_the_manifest_names(tmp_path: Path) -> None:
    export = tiny_export(tmp_path / "export")
    model = onnx.load(str(export / "model.onnx"))
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "s85"  # what the exporter writes
    onnx.save(model, str(export / "model.onnx"))
    name_dynamic_axes(export / "model.onnx", {"dynamic_axes": {"0": "batch"}})
    graph = onnx.load(str(export / "model.onnx")).graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    session = ort.InferenceSession(str(export / "model.onnx"), providers=["CPUExecutionProvider"])
    assert session.run(None, {"inputs": np.zeros((3, 8, 8), np.float32)})[0].shape == (3, 10)
