"""The same result on any number of ranks: no padded duplicates in training or evaluation.

Split sizes deliberately not divisible by the world size (nor by world x batch x accumulation):
83 training samples (batches of 4: 20 full and one of 3), 37 validation and 101 test samples.
1 process, 2 ranks and 3 ranks (CPU processes over gloo) must agree within 1e-6: in final
weights (a smooth net, SGD without momentum, fp32), in validation metrics during training and
in test metrics of the same checkpoint. A rank left without data in the epoch's last round runs
a zero-weight padding batch (no hang, no duplicate); every run has a timeout, so a hang fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.config import REPO, SMOOTH_SGD_MLP
from tests.helpers.scripts import TESTS_IMPORTABLE, run_script
from tests.helpers.state import assert_bitwise_equal, final_state

pytestmark = pytest.mark.slow

COMMON = (
    *SMOOTH_SGD_MLP,
    "data.num_samples=83",
    "data.num_val=37",
    "data.num_test=101",
    "data.eval_batch_size=8",
    "trainer.max_epochs=2",
    "trainer.accumulate_grad_batches=2",
    "callbacks.early_stopping=null",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
    "print_config=false",
)
TIMEOUT = 420  # a rank waiting for a collective that never comes fails the test instead


def train_run(run_dir: Path, *overrides: str) -> dict:
    proc = run_script("train.py", *COMMON, *overrides, f"hydra.run.dir={run_dir}", timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "results.json").read_text())


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return final_state(run_dir)["state_dict"]


def max_diff(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """1 process with the global micro-batch, and 2 / 3 ranks with batches of 4."""
    root = tmp_path_factory.mktemp("ranks")
    plans = {
        "single8": ("trainer=cpu", "data.batch_size=8"),
        "single12": ("trainer=cpu", "data.batch_size=12"),
        "ddp2": ("trainer=ddp_sim", "data.batch_size=4"),
        "ddp3": ("trainer=ddp_sim", "trainer.devices=3", "data.batch_size=4"),
    }
    for name, overrides in plans.items():
        train_run(root / name, *overrides)
    return {name: root / name for name in plans}


@pytest.mark.example("project.data.synthetic")
@pytest.mark.parametrize(("ranks", "reference"), [("ddp2", "single8"), ("ddp3", "single12")])
def test_training_on_w_ranks_equals_one_process(runs: dict[str, Path], ranks: str, reference: str):
    assert max_diff(weights(runs[ranks]), weights(runs[reference])) <= 1e-6
    got = json.loads((runs[ranks] / "results.json").read_text())
    want = json.loads((runs[reference] / "results.json").read_text())
    # every sample seen once per epoch; a rank without data pads with a zero-weight batch
    assert got["plan"]["items_per_epoch"] == want["plan"]["items_per_epoch"] == 83
    if ranks == "ddp2":  # 21 batches of 4 on 2 ranks: the last round has one batch
        assert got["plan"]["padding_batches_per_epoch"] == 1
    for key in ("val/loss", "val/acc", "val/acc_best", "test/loss", "test/acc"):
        assert abs(got["metrics"][key] - want["metrics"][key]) <= 1e-6, key


@pytest.mark.example("project.data.synthetic")
def test_eval_of_one_checkpoint_is_the_same_on_1_2_and_3_ranks(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    best = runs["single8"] / "checkpoints" / "best.ckpt"
    worlds = {
        "1": ("trainer=cpu",),
        "2": ("trainer=ddp_sim",),
        "3": ("trainer=ddp_sim", "trainer.devices=3"),
    }
    metrics = {}
    for name, overrides in worlds.items():
        out = tmp_path / f"eval{name}"
        proc = run_script(
            "eval.py", f"ckpt_path={best}", *overrides, f"hydra.run.dir={out}", timeout=TIMEOUT
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        metrics[name] = json.loads((out / "results.json").read_text())["metrics"]
    for key in ("test/loss", "test/acc"):
        values = [m[key] for m in metrics.values()]
        assert max(values) - min(values) <= 1e-6, (key, values)


@pytest.mark.example("project.data.synthetic")
def test_fsdp2_on_two_ranks_equals_one_process(runs: dict[str, Path], tmp_path: Path) -> None:
    train_run(tmp_path / "fsdp", "trainer=fsdp_sim", "data.batch_size=4")
    assert max_diff(weights(tmp_path / "fsdp"), weights(runs["single8"])) <= 1e-6


def _ddp_in_own_session(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """2 gloo ranks in their own session, so a group kill takes both ranks, not pytest."""
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train.py"), *COMMON, "trainer=ddp_sim",
         "data.batch_size=4", *extra, f"hydra.run.dir={run_dir}"],
        cwd=REPO,
        env={**os.environ, **TESTS_IMPORTABLE, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        start_new_session=True,
    )  # fmt: skip


@pytest.mark.example("project.data.synthetic")
def test_sigkill_mid_epoch_on_uneven_ranks_then_resume_is_bitwise_equal(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    run_dir = tmp_path / "killed"
    # 11 micro-batches per rank per epoch (the 11th is rank 1's padding batch); batch 14 is
    # inside epoch 1, between two step checkpoints.
    killed = _ddp_in_own_session(
        run_dir,
        "callbacks.step_checkpoint.every_n_train_steps=2",
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        "+callbacks.killer.batch=14",
        "+callbacks.killer.group=true",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = _ddp_in_own_session(run_dir, "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume=auto: resuming from" in resumed.stdout
    assert_bitwise_equal(final_state(run_dir), final_state(runs["ddp2"]))
