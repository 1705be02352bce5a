"""scripts/predict.py and scripts/export.py on a real default run (digits_cnn on data=digits)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.scripts import call_script, run_ok, run_script
from trainwell.deploy import load_run, load_trained
from trainwell.deploy.artifact import ExportInvalid, sha256_file, verify_export
from trainwell.deploy.outputs import check_export_target, prediction_name
from trainwell.deploy.parity import ExportFailed, check_parity, parity_figures
from trainwell.errors import TrainwellError
from trainwell.io.output_kind import VALUES


@pytest.fixture(scope="module")
def run(digits_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shared default run: predict and export write into it."""
    copy = tmp_path_factory.mktemp("deploy") / "run"
    shutil.copytree(digits_run, copy, ignore=shutil.ignore_patterns("export", "predictions"))
    return copy


def _ckpt(run: Path) -> str:
    return f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"


def _read(csv: Path) -> tuple[list[str], np.ndarray]:
    lines = csv.read_text().splitlines()
    return lines[0].split(","), np.array(
        [[float(c) for c in line.split(",")] for line in lines[1:]]
    )


@pytest.fixture(scope="module")
def predictions(run: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    own = tmp_path_factory.mktemp("p1") / "run"
    proc = run_ok("predict.py", own, _ckpt(run))
    assert not own.exists()  # the command's own run dir: nothing written, none left
    assert proc.stdout.count(f"checkpoint: {run / 'checkpoints' / 'best.ckpt'}") == 1
    assert proc.stdout.count(f"predictions: {run / 'predictions' / 'test.csv'}") == 1
    return (run / "predictions" / "test.csv").read_bytes()


def test_predictions_match_the_test_metric_once_each_in_index_order(
    run: Path, predictions: bytes
) -> None:
    header, rows = _read(run / "predictions" / "test.csv")
    assert header[:2] == ["index", "prediction"] and header[-1] == "target"
    index = rows[:, 0].astype(int)
    assert list(index) == sorted(set(index.tolist()))  # each sample once, in index order
    module = load_run(run / "checkpoints" / "best.ckpt")
    assert len(index) == len(module.datamodule.split_indices["test"])
    accuracy = float((rows[:, 1] == rows[:, -1]).mean())
    test_acc = json.loads((run / "results.json").read_text())["metrics"]["test/acc"]
    assert accuracy == pytest.approx(test_acc, abs=1e-6)


WORLDS = [("trainer=ddp_sim",), ("trainer=ddp_sim", "trainer.devices=3")]


@pytest.mark.slow  # two ddp_sim predictions besides the 1-process one
def test_any_world_size_gives_the_same_file_byte_for_byte(
    run: Path, predictions: bytes, tmp_path: Path
) -> None:
    """trainer=ddp_sim with 2 and 3 processes: the same predictions file as 1 process, also for
    367 raw samples, which neither world size divides (prediction runs in one process)."""
    for n, world in enumerate(WORLDS):
        run_ok("predict.py", tmp_path / f"split{n}", _ckpt(run), *world, "overwrite=true")
        assert (run / "predictions" / "test.csv").read_bytes() == predictions, world
    from sklearn.datasets import load_digits

    np.save(tmp_path / "raw.npy", load_digits().images[:367].astype(np.float32))
    raw = f"input={tmp_path / 'raw.npy'}"
    run_ok("predict.py", tmp_path / "raw1", _ckpt(run), raw)
    single = (run / "predictions" / "raw.csv").read_bytes()
    assert [int(line.split(",")[0]) for line in single.decode().splitlines()[1:]] == list(
        range(367)
    )
    for n, world in enumerate(WORLDS):
        run_ok("predict.py", tmp_path / f"raw{n + 2}", _ckpt(run), raw, *world, "overwrite=true")
        assert (run / "predictions" / "raw.csv").read_bytes() == single, world
    assert (run / "predictions" / "test.csv").read_bytes() == predictions


def test_statistics_come_from_the_checkpoint_never_refitted(run: Path, tmp_path: Path) -> None:
    ckpt = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    ckpt["DigitsDataModule"] = {"mean": 1.25, "std": 3.5}
    other = tmp_path / "run"
    shutil.copytree(run / ".hydra", other / ".hydra")
    (other / "checkpoints").mkdir()
    torch.save(ckpt, other / "checkpoints" / "best.ckpt")
    loaded = load_run(other / "checkpoints" / "best.ckpt")
    assert (loaded.datamodule.mean, loaded.datamodule.std) == (1.25, 3.5)
    assert not load_trained(other / "checkpoints" / "best.ckpt").training


def test_a_checkpoint_without_statistics_gets_one_line(run: Path, tmp_path: Path) -> None:
    ckpt = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    del ckpt["DigitsDataModule"]
    old = tmp_path / "run"
    shutil.copytree(run / ".hydra", old / ".hydra")
    (old / "checkpoints").mkdir()
    torch.save(ckpt, old / "checkpoints" / "best.ckpt")
    with pytest.raises(TrainwellError, match=r"DigitsDataModule.*retrain"):
        load_run(old / "checkpoints" / "best.ckpt")
    proc = call_script("export.py", _ckpt(old), f"hydra.run.dir={tmp_path / 'e'}")
    assert proc.returncode == 2
    assert "retrain" in proc.stderr.strip().splitlines()[-1]
    assert not (old / "export").exists()


def test_an_unknown_split_gets_one_line_and_no_file(run: Path, tmp_path: Path) -> None:
    before = sorted(p.name for p in run.iterdir())
    proc = call_script("predict.py", _ckpt(run), "split=nope", f"hydra.run.dir={tmp_path / 'p'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        proc.stderr.strip().splitlines()[-1].endswith("split=nope: choose one of train, val, test")
    )
    assert sorted(p.name for p in run.iterdir()) == before


@pytest.fixture(scope="module")
def exported(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    own = tmp_path_factory.mktemp("e1") / "run"
    proc = run_ok("export.py", own, _ckpt(run))
    assert "onnxruntime: agreement 1" in proc.stdout
    assert proc.stdout.count(f"export: {run / 'export'}") == 1 and not own.exists()
    return run / "export"


def test_the_export_reproduces_eval_with_only_onnxruntime_and_numpy(
    run: Path, exported: Path, predictions: bytes, tmp_path: Path
) -> None:
    manifest = verify_export(exported)
    assert manifest["input"]["shape"] == [None, 8, 8] and manifest["input"]["form"] == "raw"
    import onnx

    graph = onnx.load(str(exported / "model.onnx")).graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"  # as the manifest
    assert graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    parity = manifest["parity"]["paths"]
    assert parity["onnxruntime"]["agreement"] == 1.0
    assert parity["onnxruntime"]["max_abs_diff"] <= 1e-4
    assert parity["torch_export"]["max_abs_diff"] <= 1e-4
    from sklearn.datasets import load_digits

    _, rows = _read(run / "predictions" / "test.csv")
    index = rows[:, 0].astype(int)
    np.save(tmp_path / "raw.npy", load_digits().images[index].astype(np.float32))
    script = (
        "import sys, numpy as np, onnxruntime as ort\n"
        f"s = ort.InferenceSession({str(exported / 'model.onnx')!r})\n"
        f"x = np.load({str(tmp_path / 'raw.npy')!r})\n"
        "out = np.concatenate([s.run(None, {'inputs': x[i:i + 1]})[0] for i in range(3)]"
        " + [s.run(None, {'inputs': x[3:]})[0]])\n"
        "assert 'torch' not in sys.modules\n"
        "print(' '.join(str(int(v)) for v in out.argmax(-1)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [int(v) for v in proc.stdout.split()] == rows[:, 1].astype(int).tolist()


def test_a_tampered_or_half_written_export_is_refused(exported: Path, tmp_path: Path) -> None:
    copy = tmp_path / "export"
    shutil.copytree(exported, copy)
    onnx = copy / "model.onnx"
    onnx.write_bytes(onnx.read_bytes()[:-1] + b"\0")
    with pytest.raises(ExportInvalid, match=r"model\.onnx"):
        verify_export(copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(ExportInvalid, match=r"manifest\.json"):
        verify_export(copy)


def test_parity_is_enforced_on_agreement_and_max_difference() -> None:
    eager = np.array([[0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    close = parity_figures(eager, {"onnxruntime": eager + 5e-5}, np.array([1, 0]))
    check_parity(close, 1e-4)
    assert close["paths"]["onnxruntime"]["accuracy"] == 1.0
    with pytest.raises(ExportFailed, match="max"):
        check_parity(parity_figures(eager, {"onnxruntime": eager + 1e-3}, None), 1e-4)
    swapped = eager[:, ::-1].copy()
    with pytest.raises(ExportFailed, match="agreement"):
        check_parity(parity_figures(eager, {"onnxruntime": swapped}, None), 10.0)


def test_values_in_large_units_may_differ_by_their_float32_rounding() -> None:
    """A regression answering in large units (house prices, ~2e5) differs on another runtime by
    float32's steps there (0.0156): within 1e-5 of each value it passes; beyond, the refusal
    names both figures and the knob."""
    eager = np.array([[2.0e5], [1.5e5], [0.0]], dtype=np.float32)
    rounded = eager + np.array([[0.0625], [-0.03125], [5e-5]], dtype=np.float32)
    check_parity(parity_figures(eager, {"onnxruntime": rounded}, None, VALUES), 1e-4)
    off = eager + np.array([[5.0], [0.0], [0.0]], dtype=np.float32)
    with pytest.raises(ExportFailed, match=r"max relative 2.5e-05.*parity_tolerance\)"):
        check_parity(parity_figures(eager, {"onnxruntime": off}, None, VALUES), 1e-4)
    near_zero = eager + np.array([[0.0], [0.0], [1e-3]], dtype=np.float32)
    with pytest.raises(ExportFailed):  # near 0 only the absolute tolerance applies
        check_parity(parity_figures(eager, {"onnxruntime": near_zero}, None, VALUES), 1e-4)


@pytest.mark.slow
def test_failed_parity_exits_2_and_leaves_no_export(run: Path, tmp_path: Path) -> None:
    other = tmp_path / "run"
    shutil.copytree(run, other, ignore=shutil.ignore_patterns("export"))
    proc = run_script(
        "export.py", _ckpt(other), "parity_tolerance=-1.0", f"hydra.run.dir={tmp_path / 'e'}"
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "parity failed" in proc.stderr.strip().splitlines()[-1]
    assert not (other / "export").exists()
    assert not list(other.glob(".export*"))


def test_a_second_predict_never_replaces_the_first_without_the_flag(
    run: Path, predictions: bytes, tmp_path: Path
) -> None:
    assert prediction_name("test", None) == "test"
    assert prediction_name("test", "data/my.samples.npy") == "my.samples"  # input=: its stem
    assert prediction_name("test", "pngs/") == "pngs"
    own = tmp_path / "p"
    proc = call_script("predict.py", _ckpt(run), f"hydra.run.dir={own}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "test.csv exists" in lines[0] and "overwrite=true" in lines[0]
    assert (run / "predictions" / "test.csv").read_bytes() == predictions
    assert not own.exists()


def test_an_export_of_another_checkpoint_is_never_replaced_silently(exported: Path) -> None:
    ckpt = exported.parent / "checkpoints" / "best.ckpt"
    check_export_target(exported, sha256_file(ckpt), overwrite=False)  # the same: replaced
    with pytest.raises(TrainwellError, match=rf"holds the export of {ckpt}.*overwrite=true"):
        check_export_target(exported, "0" * 64, overwrite=False)
    check_export_target(exported, "0" * 64, overwrite=True)
