"""A cloner's first hour, as the README and docs/your-project.md describe it: the scripts without
the venv, then a clone with its own datamodule, net and experiment added in its room (src/project/)
as "Bring your own module" says, whose structural tests stay green and whose experiment trains
through the real script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.config import REPO
from tests.test_bring_your_own import clone, run_in_clone, venv_env


@pytest.mark.parametrize("script", ["train.py", "eval.py", "doctor.py"])
def test_a_python_without_the_project_gets_one_line_naming_the_fix(script: str) -> None:
    # -S: no site-packages, as a system python without the project's dependencies
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-S", str(REPO / "scripts" / script)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "make train" in proc.stderr and ".venv/bin/python" in proc.stderr


MOONS = '''
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Moons(L.LightningDataModule):
    """Two features, two interleaved half-circles."""

    def __init__(self, batch_size: int = 32, samples: int = 400, noise: float = 0.1) -> None:
        super().__init__()
        self.batch_size, self.samples, self.noise = batch_size, samples, noise

    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        t = torch.rand(self.samples, generator=g) * torch.pi
        y = torch.arange(self.samples) % 2
        x = torch.stack([torch.cos(t) + y, torch.sin(t) * (1 - 2 * y) + 0.5 * y], 1)
        x = x + self.noise * torch.randn(x.shape, generator=g)
        n = self.samples * 3 // 4
        self.train_set, self.val_set = TensorDataset(x[:n], y[:n]), TensorDataset(x[n:], y[n:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
'''

NET = """
from torch import nn


class MyNet(nn.Sequential):
    def __init__(self, num_classes: int, hidden: int = 32) -> None:
        super().__init__(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, num_classes))
"""

FILES = {
    "src/project/data/moons.py": MOONS,
    "src/project/models/my_net.py": NET,
    "conf/data/moons.yaml": "_target_: project.data.moons.Moons\nbatch_size: 32\n",
    "conf/experiment/myexp.yaml": (
        "# @package _global_\n"
        "defaults:\n  - override /data: moons\n  - override /model: mynet\n"
        "task_name: myexp\nmonitor:\n  metric: val/acc\n  mode: max\n"
        "model:\n  num_classes: 2\ntrainer:\n  max_epochs: 3\n"
    ),
}


def _page_mynet() -> str:
    """conf/model/mynet.yaml exactly as docs/your-project.md writes it."""
    page = (REPO / "docs" / "your-project.md").read_text()
    block = page.split("```yaml\n# conf/model/mynet.yaml\n", 1)[1].split("```", 1)[0]
    return block


@pytest.fixture(scope="module")
def cloned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = clone(tmp_path_factory.mktemp("cloner"))
    for name, text in {**FILES, "conf/model/mynet.yaml": _page_mynet()}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.slow  # a pytest session of its own in the clone
def test_a_cloners_own_configs_keep_the_structural_tests_green(cloned: Path) -> None:
    # The clone's tests import the clone's own src, as its editable install would.
    env = {**venv_env(), "PYTHONPATH": str(cloned / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_layout.py"],
        cwd=cloned,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.example("project.tasks.classification")  # the page's mynet is a classifier
def test_a_cloners_experiment_trains_through_the_script(cloned: Path, tmp_path: Path) -> None:
    proc = run_in_clone(cloned, "train.py", "experiment=myexp", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "results.json").is_file()
