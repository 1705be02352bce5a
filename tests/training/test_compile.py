"""model.compile=true compiles the net in place: checkpoints keep the same keys (no `_orig_mod.`),
so eval.py and resume load them whether or not either side is compiled. Real inductor on CPU."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.conftest import run_script
from trainwell.tasks import ClassificationTask

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


@pytest.mark.slow
def test_compiled_checkpoint_evaluates_without_compile(tmp_path: Path) -> None:
    train = run_script(
        "train.py",
        *SMALL,
        "model.compile=true",
        "trainer.max_epochs=1",
        f"hydra.run.dir={tmp_path / 'train'}",
    )
    assert train.returncode == 0, train.stderr[-2000:]
    trained = json.loads((tmp_path / "train" / "results.json").read_text())
    best = Path(trained["best_ckpt"])
    assert not any("_orig_mod" in k for k in _keys(best))
    evaluated = run_script(
        "eval.py",
        *SMALL,
        "model.compile=false",
        f"ckpt_path={best}",
        f"hydra.run.dir={tmp_path / 'eval'}",
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    metrics = json.loads((tmp_path / "eval" / "results.json").read_text())["metrics"]
    assert metrics["test/acc"] == pytest.approx(trained["metrics"]["test/acc"], abs=1e-6)


@pytest.mark.slow
def test_plain_checkpoint_resumes_compiled(tmp_path: Path) -> None:
    first = run_script(
        "train.py",
        *SMALL,
        "trainer.max_epochs=1",
        "test=false",
        f"hydra.run.dir={tmp_path / 'plain'}",
    )
    assert first.returncode == 0, first.stderr[-2000:]
    last = tmp_path / "plain" / "checkpoints" / "last.ckpt"
    resumed = run_script(
        "train.py",
        *SMALL,
        "model.compile=true",
        "trainer.max_epochs=2",
        "test=false",
        f"ckpt_path={last}",
        f"hydra.run.dir={tmp_path / 'compiled'}",
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    resumed_last = tmp_path / "compiled" / "checkpoints" / "last.ckpt"
    assert _keys(resumed_last) == _keys(last)
    state = torch.load(resumed_last, map_location="cpu", weights_only=True)
    assert state["epoch"] == 1  # the second epoch ran on top of the first
