"""Predict and export on CIFAR-10 (experiment=resnet_accum) from raw uint8 HWC images.

The tiny on-disk fixture in the real file format (tests/helpers/torchvision_batches.py) stands in for
the download; the scripts run in a subprocess that trusts the fixture's md5 sums (the raw-input
predictions, whose process boundary is not under test, run in-process with the same trust).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import CIFAR10

from tests.helpers.scripts import call_script
from tests.helpers.torchvision_batches import run_script_on_fixture, trust_fixture, write_cifar10
from trainwell.blocks.preprocess import ImageNormalize
from trainwell.deploy import load_run
from trainwell.deploy.artifact import verify_export
from trainwell.deploy.raw import raw_data

pytestmark = pytest.mark.example("project.data.cifar10", "project.models.resnet")

TINY = (
    "experiment=resnet_accum",
    "model.net.width=8",
    "data.val_size=10",
    "data.batch_size=16",
    "data.num_workers=0",
    "trainer.accelerator=cpu",
    "trainer.accumulate_grad_batches=1",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.num_sanity_val_steps=0",
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
)


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("cifar")
    return root, write_cifar10(root, per_batch=20)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def run(cifar: tuple[Path, dict[str, str]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root, md5 = cifar
    run_dir = tmp_path_factory.mktemp("cifar_run") / "run"
    _ok(
        run_script_on_fixture(
            "train.py", md5, *TINY, f"data.data_dir={root}", f"hydra.run.dir={run_dir}"
        )
    )
    return run_dir


def _ckpt(run: Path) -> str:
    return f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"


CIFAR_CLASSES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]


def _rows(csv: bytes) -> tuple[list[str], list[list[str]]]:
    lines = csv.decode().splitlines()
    return lines[0].split(","), [line.split(",") for line in lines[1:]]


def _test_images(root: Path) -> np.ndarray:
    """The fixture's test file as torchvision stores it (uint8 N x 32 x 32 x 3)."""
    entry = pickle.loads((root / CIFAR10.base_folder / "test_batch").read_bytes())
    return entry["data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy()


def test_the_normalisation_travels_in_the_checkpoint(run: Path) -> None:
    ckpt = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    assert ckpt["CIFAR10DataModule"] == {
        "mean": [0.4914, 0.4822, 0.4465],
        "std": [0.2470, 0.2435, 0.2616],
    }


def test_the_raw_graph_equals_the_eval_transform_exactly(
    cifar: tuple[Path, dict[str, str]], run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uint8 HWC through the graph's preprocessing = the datamodule's test batch, bit for bit."""
    trust_fixture(monkeypatch, cifar[1])
    loaded = load_run(run / "checkpoints" / "best.ckpt")
    raw = raw_data(loaded.datamodule)
    samples, index, targets = raw.splits["test"]
    assert samples.dtype == np.uint8 and samples.shape == (20, 32, 32, 3)
    assert isinstance(raw.preprocess, ImageNormalize)
    x, y = next(iter(loaded.datamodule.test_dataloader()))
    assert torch.equal(raw.preprocess(torch.from_numpy(samples[: len(x)])), x)
    assert y.tolist() == targets[: len(y)].tolist() and index.tolist() == list(range(20))
    # A checkpoint's statistics win over the module's constants.
    loaded.datamodule.load_state_dict({"mean": [0.5] * 3, "std": [0.25] * 3})
    other = raw_data(loaded.datamodule).preprocess(torch.from_numpy(samples[:1]))
    expected = (torch.from_numpy(samples[:1]).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.25
    assert torch.equal(other, expected)


@pytest.fixture(scope="module")
def predictions(
    cifar: tuple[Path, dict[str, str]], run: Path, tmp_path_factory: pytest.TempPathFactory
) -> bytes:
    out = tmp_path_factory.mktemp("cifar_p1")
    proc = _ok(run_script_on_fixture("predict.py", cifar[1], _ckpt(run), f"hydra.run.dir={out}"))
    assert f"predictions: {run / 'predictions' / 'test.csv'}" in proc.stdout
    return (run / "predictions" / "test.csv").read_bytes()


def test_predictions_match_the_test_metric(run: Path, predictions: bytes) -> None:
    header, rows = _rows(predictions)
    assert header == ["index", "prediction", *(f"p_{c}" for c in CIFAR_CLASSES), "target"]
    assert [int(r[0]) for r in rows] == list(range(20))
    accuracy = sum(r[1] == r[-1] for r in rows) / len(rows)
    test_acc = json.loads((run / "results.json").read_text())["metrics"]["test/acc"]
    assert accuracy == pytest.approx(test_acc, abs=1e-6)


def test_raw_npy_and_png_inputs_predict_what_the_split_predicts(
    cifar: tuple[Path, dict[str, str]],
    run: Path,
    predictions: bytes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from PIL import Image

    root, md5 = cifar
    trust_fixture(monkeypatch, md5)
    test = _test_images(root)
    np.save(tmp_path / "raw.npy", test)
    pngs = tmp_path / "pngs"
    pngs.mkdir()
    for i, image in enumerate(test):
        Image.fromarray(image).save(pngs / f"{i:03d}.png")
    by_split = [r[:-1] for r in _rows(predictions)[1]]  # without the target
    for source in (tmp_path / "raw.npy", pngs):
        out = tmp_path / f"p_{source.name}"
        _ok(call_script("predict.py", _ckpt(run), f"input={source}", f"hydra.run.dir={out}"))
        assert _rows((run / "predictions" / f"{source.stem}.csv").read_bytes())[1] == by_split
    _ok(
        call_script(
            "predict.py",
            _ckpt(run),
            f"input={pngs / '003.png'}",
            f"hydra.run.dir={tmp_path / 'one'}",
        )
    )
    assert _rows((run / "predictions" / "003.csv").read_bytes())[1] == [["0", *by_split[3][1:]]]


def test_bad_raw_input_gets_one_line_and_exit_2(
    cifar: tuple[Path, dict[str, str]], run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import Image

    trust_fixture(monkeypatch, cifar[1])

    np.save(tmp_path / "float.npy", np.zeros((2, 32, 32, 3), dtype=np.float32))
    np.save(tmp_path / "chw.npy", np.zeros((2, 3, 32, 32), dtype=np.uint8))
    Image.fromarray(np.zeros((32, 32), dtype=np.uint8)).save(tmp_path / "grey.png")
    Image.fromarray(np.zeros((32, 32, 4), dtype=np.uint8), "RGBA").save(tmp_path / "rgba.png")
    cases = [
        ("float.npy", "integers"),
        ("chw.npy", "shape"),
        ("grey.png", "RGB PNG, got 32x32 L"),  # the image's own mode, not a converted array's
        ("rgba.png", "RGB PNG, got 32x32 RGBA"),
    ]
    for name, says in cases:
        proc = call_script(
            "predict.py", _ckpt(run), f"input={tmp_path / name}", f"hydra.run.dir={tmp_path / 'p'}"
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert says in last and name in last, last


@pytest.fixture(scope="module")
def exported(
    cifar: tuple[Path, dict[str, str]], run: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    out = tmp_path_factory.mktemp("cifar_e1")
    proc = _ok(run_script_on_fixture("export.py", cifar[1], _ckpt(run), f"hydra.run.dir={out}"))
    assert "onnxruntime: agreement 1" in proc.stdout
    return run / "export"


def test_the_export_takes_raw_uint8_images_and_reproduces_eval(
    cifar: tuple[Path, dict[str, str]],
    run: Path,
    exported: Path,
    predictions: bytes,
    tmp_path: Path,
) -> None:
    manifest = verify_export(exported)
    assert manifest["input"]["dtype"] == "uint8"
    assert manifest["input"]["shape"] == [None, 32, 32, 3]
    assert manifest["output"]["classes"] == list(CIFAR_CLASSES)
    for path in ("onnxruntime", "torch_export"):
        assert manifest["parity"]["paths"][path]["agreement"] == 1.0
        assert manifest["parity"]["paths"][path]["max_abs_diff"] <= 1e-4
    import onnx

    graph = onnx.load(str(exported / "model.onnx"))
    assert graph.opset_import[0].version >= 18
    np.save(tmp_path / "raw.npy", _test_images(cifar[0]))
    script = (
        "import sys, numpy as np, onnxruntime as ort\n"
        f"s = ort.InferenceSession({str(exported / 'model.onnx')!r})\n"
        f"x = np.load({str(tmp_path / 'raw.npy')!r})\n"
        "assert x.dtype == np.uint8\n"
        "out = np.concatenate([s.run(None, {'inputs': x[:1]})[0], s.run(None, {'inputs': x[1:]})[0]])\n"
        "assert 'torch' not in sys.modules\n"
        "print(' '.join(str(int(v)) for v in out.argmax(-1)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [int(v) for v in proc.stdout.split()] == [int(r[1]) for r in _rows(predictions)[1]]
