"""The doctor end to end: every id reported, healthy shipped experiments clean, CLI exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.config import compose_config
from tests.helpers.doctor import MUSEUM
from tests.helpers.scripts import run_script
from trainwell.doctor.checks import CHECKS
from trainwell.doctor.run import diagnose, run_doctor

TINY_RESNET = [
    "experiment=resnet_accum",
    "data=synthetic",
    "data.num_samples=256",
    "data.num_val=64",
    "data.num_test=64",
    "model.net.width=8",
]


def _statuses(report: dict) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["checks"]}


def test_default_experiment_is_clean_and_fully_reported(tmp_path: Path) -> None:
    cfg = compose_config([], tmp_path / "run", config_name="doctor")
    _, out = diagnose(cfg)
    report = json.loads((out / "report.json").read_text())
    assert report["version"] == 1
    assert [c["id"] for c in report["checks"]] == list(CHECKS)
    statuses = _statuses(report)
    assert [i for i, s in statuses.items() if s in ("fail", "warn")] == []
    # Skips carry their reason: no CUDA here, no worker processes in the default loader, no
    # padding in digit images, no weight average (ema.decay is null).
    skipped = {c["id"]: c["message"] for c in report["checks"] if c["status"] == "skip"}
    allowed = {"device.placement", "data.worker_seeding", "loss.padding", "weights.averaging"}
    assert set(skipped) <= allowed
    assert all(len(m) > 20 for m in skipped.values())
    assert all(c["seconds"] >= 0 for c in report["checks"])
    # The overfit probe runs before the checks (several read it); its check still reports the
    # time of the fit it judges, which covers every step that fit trained.
    overfit = next(c for c in report["checks"] if c["id"] == "overfit.one_batch")
    assert overfit["evidence"]["steps"] >= 60
    assert overfit["evidence"]["seconds"] > 0
    # evidence is rounded to 2 decimals, the check's seconds to 3: each may be off by half a unit
    assert overfit["seconds"] >= overfit["evidence"]["seconds"] - 0.005 - 0.0005 - 1e-9
    for png in ("overfit_one_batch.png", "grad_norms.png", "lr_schedule.png"):
        assert (out / png).stat().st_size > 1000
    note = (out / "report.md").read_text()
    for section in ("## The experiment", "## Training plan", "## Checks", "## Risks left"):
        assert section in note
    assert "| `optimizer.coverage` | pass |" in note


@pytest.mark.example(
    "project.data.sequences", "project.models.transformer", "project.tasks.language_model"
)
@pytest.mark.slow
def test_language_model_experiment_is_clean(tmp_path: Path) -> None:
    cfg = compose_config(["experiment=lm_accum"], tmp_path / "run", config_name="doctor")
    checks, _ = diagnose(cfg)
    by_id = {c.id: c for c in checks}
    assert [c.id for c in checks if c.status in ("fail", "warn")] == []
    assert {c.id for c in checks if c.status == "skip"} <= {
        "device.placement",
        "data.worker_seeding",
        "data.class_balance",  # token sequences: no class per sample to count
        "data.batch_composition",  # nor a class composition of its batches
        "model.head_width",  # a vocabulary, not classes: nothing declares a class count
        "weights.averaging",  # ema.decay is null: no average to look at
        "metrics.recomputation",  # it logs a loss and a perplexity, no accuracy to recompute
    }
    assert "not (input, label) pairs" in by_id["data.class_balance"].message
    assert "declares no num_classes" in by_id["model.head_width"].message
    # dict batches: the doctor found the targets inside them and compared real windows by tokens
    assert by_id["targets.contract"].evidence["target_in_batch"] == "batch['targets']"
    assert by_id["accumulation.equivalence"].evidence["item_unit"] == "LanguageModelTask.loss_items"


@pytest.mark.example("project.data.cifar10", "project.data.synthetic", "project.models.resnet")
@pytest.mark.slow
def test_tiny_resnet_accum_only_warns_about_batchnorm(tmp_path: Path) -> None:
    cfg = compose_config(TINY_RESNET, tmp_path / "run", config_name="doctor")
    checks, _ = diagnose(cfg)
    flagged = {c.id: c.status for c in checks if c.status in ("fail", "warn")}
    # By design, BatchNorm over micro-batches under accumulation is the one expected warning.
    assert flagged == {"accumulation.equivalence": "warn"}, [c.message for c in checks]


@pytest.mark.slow  # every check, to the one that fails
def test_exit_code_is_one_when_a_check_fails(tmp_path: Path) -> None:
    overrides = [
        f"model.net._target_={MUSEUM}.SoftmaxNet",
        "model.net.width=8",
        "probe.overfit_steps=8",
    ]
    cfg = compose_config(overrides, tmp_path / "run", config_name="doctor")
    assert run_doctor(cfg) == 1
    report = json.loads((tmp_path / "run" / "doctor" / "report.json").read_text())
    assert _statuses(report)["loss.logits"] == "fail"


@pytest.mark.slow
def test_cli_on_defaults_exits_zero_and_writes_the_report(tmp_path: Path) -> None:
    done = run_script("doctor.py", f"hydra.run.dir={tmp_path}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "doctor" / "report.json").is_file()
    assert "optimizer.coverage" in done.stdout
