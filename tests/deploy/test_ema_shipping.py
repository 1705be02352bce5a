"""An EMA run of the shipped digits CNN (BatchNorm after every convolution) ships its average:
export.py writes the averaged weights and BatchNorm statistics (the checkpoint's state_dict, not
the trained weights beside it), and the exported graphs answer as evaluation did (the export's
parity, and its accuracy is results.json's test accuracy); predict.py and load_from_checkpoint
use the average too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.config import QUIET_RUN
from tests.helpers.scripts import call_script
from tests.helpers.state import load_checkpoint
from trainwell.deploy.artifact import verify_export

RUN = [*QUIET_RUN, "trainer.max_epochs=2", "ema.decay=0.9", "trainer.accumulate_grad_batches=2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("ema_digits") / "run"
    # Through the script: the run dir gets the saved config load_from_checkpoint rebuilds from.
    proc = call_script("train.py", *RUN, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def test_batchnorm_statistics_are_averaged_and_the_counter_copied(run: Path) -> None:
    checkpoint = load_checkpoint(run / "checkpoints" / "last.ckpt")
    averaged, trained = checkpoint["state_dict"], checkpoint["current_model_state"]
    means = [k for k in averaged if k.endswith("running_mean")]
    assert len(means) == 3
    for key in means:
        assert not torch.equal(averaged[key], trained[key]), key  # averaged, not copied
    for key in (k for k in averaged if k.endswith("num_batches_tracked")):
        assert torch.equal(averaged[key], trained[key]), key  # a counter: copied


@pytest.mark.slow  # an export with both parity paths: its own script run
def test_the_export_ships_the_average_and_answers_as_evaluation(run: Path, tmp_path: Path) -> None:
    best = run / "checkpoints" / "best.ckpt"
    proc = call_script("export.py", f"ckpt_path={best}", f"hydra.run.dir={tmp_path / 'export'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = verify_export(run / "export")
    shipped = load_file(run / "export" / "weights.safetensors")
    checkpoint = load_checkpoint(best)
    assert shipped.keys() == checkpoint["state_dict"].keys()
    for key, value in checkpoint["state_dict"].items():
        assert torch.equal(shipped[key], value), key
    assert any(
        not torch.equal(shipped[k], checkpoint["current_model_state"][k]) for k in shipped
    )  # ... which are not the trained weights
    parity = manifest["parity"]["paths"]
    for path in ("onnxruntime", "torch_export"):
        assert parity[path]["agreement"] == 1.0 and parity[path]["max_abs_diff"] <= 1e-4
    test_acc = json.loads((run / "results.json").read_text())["metrics"]["test/acc"]
    assert parity["onnxruntime"]["accuracy"] == pytest.approx(test_acc, abs=1e-6)


@pytest.mark.slow  # a predict script run
def test_predictions_score_the_test_metric_of_the_average(run: Path, tmp_path: Path) -> None:
    best = run / "checkpoints" / "best.ckpt"
    proc = call_script("predict.py", f"ckpt_path={best}", f"hydra.run.dir={tmp_path / 'predict'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(",") for line in (run / "predictions" / "test.csv").read_text().splitlines()]
    header, body = rows[0], rows[1:]
    predicted, target = header.index("prediction"), header.index("target")
    accuracy = sum(r[predicted] == r[target] for r in body) / len(body)
    test_acc = json.loads((run / "results.json").read_text())["metrics"]["test/acc"]
    assert accuracy == pytest.approx(test_acc, abs=1e-6)


def test_load_from_checkpoint_returns_the_average(run: Path) -> None:
    from project.tasks.classification import ClassificationTask

    best = run / "checkpoints" / "best.ckpt"
    module = ClassificationTask.load_from_checkpoint(best)
    for key, value in load_checkpoint(best)["state_dict"].items():
        assert torch.equal(module.state_dict()[key], value), key
