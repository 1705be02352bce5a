"""num_classes is written once (the datamodule's), and the doctor warns when a head disagrees."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.config import compose_config
from tests.helpers.doctor import FAST, run_ids
from tests.helpers.scripts import run_script

TWO_CLASSES = ["data=synthetic", "data.num_classes=2", "data.num_samples=256", "model=mlp"]


@pytest.mark.example("project.data.synthetic")
def test_the_models_num_classes_defaults_from_the_datamodule(tmp_path: Path) -> None:
    assert compose_config([], tmp_path).model.num_classes == 10  # DigitsDataModule.num_classes
    two = compose_config(TWO_CLASSES, tmp_path)
    assert two.model.num_classes == 2 and two.model.net._args_[3].out_features == 2


def test_a_matching_head_passes(tmp_path: Path) -> None:
    check = run_ids(tmp_path, FAST, ["model.head_width"])["model.head_width"]
    assert check.status == "pass", check.message
    assert check.evidence["logits_width"] == 10 == check.evidence["data_num_classes"]


@pytest.mark.example("project.data.synthetic")
def test_a_head_wider_than_the_declared_classes_is_warned_with_both_numbers(
    tmp_path: Path,
) -> None:
    overrides = [*TWO_CLASSES, "model.num_classes=10"]
    check = run_ids(tmp_path, [*overrides, "probe.overfit_steps=12"], ["model.head_width"])
    found = check["model.head_width"]
    assert found.status == "warn", found.message
    assert "10 outputs" in found.message and "declares 2 classes" in found.message
    assert "model.num_classes=2" in found.message


@pytest.mark.example("project.data.synthetic")
def test_the_doctor_script_prints_the_warning(tmp_path: Path) -> None:
    proc = run_script(
        "doctor.py",
        *TWO_CLASSES,
        "model.num_classes=10",
        "probe.overfit_steps=12",
        f"hydra.run.dir={tmp_path}",
    )
    lines = [line for line in proc.stdout.splitlines() if "model.head_width" in line]
    assert len(lines) == 1 and " warn " in lines[0], proc.stdout[-3000:]
    assert "10 outputs" in lines[0] and "2 classes" in lines[0]


@pytest.mark.example("project.data.sequences")
def test_a_datamodule_without_num_classes_under_the_classification_task_is_one_line(
    tmp_path: Path,
) -> None:
    proc = run_script("train.py", "data=sequences", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert "declares no num_classes" in line and "model.num_classes=<n>" in line, line
