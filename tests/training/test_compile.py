"""model.compile=true compiles the net in place: checkpoints keep the same keys (no `_orig_mod.`),
so eval.py and resume load them whether or not either side is compiled. Real inductor on CPU."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
from torch import nn

from project.tasks.classification import ClassificationTask
from tests.helpers.scripts import run_ok

pytestmark = pytest.mark.example("project.tasks.classification")

SMALL = (
    "model=mlp",
    "data=synthetic",
    "data.num_samples=64",
    "data.num_val=16",
    "data.num_test=16",
    "data.batch_size=32",
    "trainer.num_sanity_val_steps=0",
    "print_config=false",
)


def _keys(path: Path) -> set[str]:
    return set(torch.load(path, map_location="cpu", weights_only=True)["state_dict"])


def test_compiled_task_keeps_plain_state_dict_keys() -> None:
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    plain = set(ClassificationTask(net, partial(torch.optim.SGD, lr=0.1)).state_dict())
    task = ClassificationTask(
        nn.Sequential(nn.Flatten(), nn.Linear(12, 3)),
        partial(torch.optim.SGD, lr=0.1),
        compile=True,
    )
    task.configure_model()
    assert task.net._compiled_call_impl is not None  # nn.Module.compile() took effect
    assert set(task.state_dict()) == plain


@pytest.mark.example("project.data.synthetic")
@pytest.mark.slow
def test_compiled_checkpoint_evaluates_without_compile(tmp_path: Path) -> None:
    run_ok("train.py", tmp_path / "train", *SMALL, "model.compile=true", "trainer.max_epochs=1")
    trained = json.loads((tmp_path / "train" / "results.json").read_text())
    best = Path(trained["best_ckpt"])
    assert not any("_orig_mod" in k for k in _keys(best))
    run_ok("eval.py", tmp_path / "eval", *SMALL, "model.compile=false", f"ckpt_path={best}")
    metrics = json.loads((tmp_path / "eval" / "results.json").read_text())["metrics"]
    assert metrics["test/acc"] == pytest.approx(trained["metrics"]["test/acc"], abs=1e-6)


@pytest.mark.example("project.data.synthetic")
@pytest.mark.slow
def test_plain_checkpoint_resumes_compiled(tmp_path: Path) -> None:
    run_ok("train.py", tmp_path / "plain", *SMALL, "trainer.max_epochs=1", "test=false")
    last = tmp_path / "plain" / "checkpoints" / "last.ckpt"
    run_ok(
        "train.py",
        tmp_path / "compiled",
        *SMALL,
        "model.compile=true",
        "trainer.max_epochs=2",
        "test=false",
        f"ckpt_path={last}",
    )
    resumed_last = tmp_path / "compiled" / "checkpoints" / "last.ckpt"
    assert _keys(resumed_last) == _keys(last)
    state = torch.load(resumed_last, map_location="cpu", weights_only=True)
    assert state["epoch"] == 1  # the second epoch ran on top of the first
