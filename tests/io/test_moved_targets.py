"""Runs written before a release moved a class still load.

A run's saved config and overrides name its classes as they were named when it ran. The run here
is the shared default run with its saved files written back to the names of the release before
the examples left the engine (`trainwell.data.DigitsDataModule`, ...): nothing else in a run dir
names a class (the checkpoint holds tensors and plain values), so that is a run of that release.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from tests.helpers.config import REPO
from tests.helpers.scripts import run_ok, run_python
from trainwell.io.moved_targets import MOVED, current_name, current_override, current_targets

BEFORE = {new: old for old, new in MOVED}


def _as_before_the_move(text: str) -> str:
    # that release named a class by its package (its faces imported their modules)
    text = re.sub(r"\bproject\.(data|models|tasks)\.\w+\.([A-Z]\w*)", r"project.\1.\2", text)
    for new, old in BEFORE.items():
        text = text.replace(new, old)
    return text


@pytest.fixture(scope="module")
def old_run(digits_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("moved") / "run"
    shutil.copytree(digits_run, run, ignore=shutil.ignore_patterns("export", "predictions"))
    config = run / ".hydra" / "config.yaml"
    config.write_text(_as_before_the_move(config.read_text()))
    # A class named on the command line is saved as an override: it moved too.
    overrides = run / ".hydra" / "overrides.yaml"
    saved = yaml.safe_load(overrides.read_text()) or []
    saved.append("model.scheduler._target_=trainwell.tasks.schedules.warmup_cosine")
    overrides.write_text(yaml.safe_dump(saved))
    assert "_target_: trainwell.data.DigitsDataModule" in config.read_text()
    assert "_target_: trainwell.models.DigitsCNN" in config.read_text()
    return run


@pytest.mark.example(
    "project.data.digits", "project.models.digits_cnn", "project.tasks.classification"
)
def test_each_moved_name_reads_as_this_release_spells_it() -> None:
    assert current_name("trainwell.data.DigitsDataModule") == "project.data.digits.DigitsDataModule"
    assert current_name("trainwell.tasks.schedules.warmup_cosine") == (
        "trainwell.blocks.schedules.warmup_cosine"
    )
    assert current_name("trainwell.tasks.ClassificationTask") == (
        "project.tasks.classification.ClassificationTask"
    )
    # the release between: the room's package faces re-exported their classes
    assert current_name("project.models.DigitsCNN") == "project.models.digits_cnn.DigitsCNN"
    assert current_name("project.data.digits.DigitsDataModule") == (
        "project.data.digits.DigitsDataModule"
    )
    assert current_name("trainwell.training.run") == "trainwell.training.run"  # never moved
    assert current_name("torch.optim.AdamW") == "torch.optim.AdamW"
    assert current_override("data._target_=trainwell.data.X") == "data._target_=project.data.X"
    assert current_override("trainer.max_epochs=3") == "trainer.max_epochs=3"
    cfg = OmegaConf.create(
        {
            "model": {"_target_": "trainwell.tasks.T", "net": {"_target_": "trainwell.models.N"}},
            "callbacks": [{"_target_": "trainwell.data.D"}],
            "same": "${model.net._target_}",  # an interpolation follows what it points at
            "unset": "???",
        }
    )
    current_targets(cfg)
    assert cfg.model._target_ == "project.tasks.T"
    assert cfg.model.net._target_ == "project.models.N"
    assert cfg.callbacks[0]._target_ == "project.data.D"
    assert cfg.same == "project.models.N"


def test_the_python_api_rebuilds_a_run_from_before_the_move(old_run: Path) -> None:
    """In a fresh interpreter, as a user's `python -c` or notebook would: load_trained and the
    task's load_from_checkpoint give the checkpoint's weights, in eval mode."""
    ckpt = old_run / "checkpoints" / "best.ckpt"
    code = (
        "import torch\n"
        "from trainwell.deploy import load_trained\n"
        f"path = {str(ckpt)!r}\n"
        "saved = torch.load(path, map_location='cpu', weights_only=True)['state_dict']\n"
        "trained = load_trained(path)  # first: nothing else has registered ${tw.*} yet\n"
        "from project.tasks.classification import ClassificationTask\n"
        "for module in (trained, ClassificationTask.load_from_checkpoint(path)):\n"
        "    state = module.state_dict()\n"
        "    assert not module.training and state.keys() == saved.keys()\n"
        "    assert all(torch.equal(state[k], saved[k]) for k in saved)\n"
        "print('rebuilt')\n"
    )
    proc = run_python({"command": code}, [], REPO, {**os.environ, "PYTHONUNBUFFERED": "1"}, 300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "rebuilt"


def test_predict_reads_a_run_from_before_the_move(old_run: Path, tmp_path: Path) -> None:
    ckpt = old_run / "checkpoints" / "best.ckpt"
    run_ok("predict.py", tmp_path / "own", f"ckpt_path={ckpt}")
    rows = (old_run / "predictions" / "test.csv").read_text().splitlines()
    assert rows[0].startswith("index,prediction") and len(rows) == 1 + 360
    assert torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"] > 0
