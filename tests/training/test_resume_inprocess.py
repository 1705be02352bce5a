"""Fast (default-suite) resume checks: in-process runs of training.run.train on the tests' own
digits modules (tests/owned), with dropout and a schedule that steps mid-run.

A mid-epoch, mid-schedule step checkpoint resumed with resume=auto must reproduce the
uninterrupted run bitwise (weights, optimizer, scheduler); the slow kill tests do the same with
real SIGKILLs in subprocesses.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.config import OWNED, compose_config
from tests.helpers.kill_runs import IN_PROCESS_RUN
from tests.helpers.state import assert_bitwise_equal, assert_same_results_elsewhere, load_checkpoint
from trainwell.errors import TrainwellError
from trainwell.training.resume import find_newest_checkpoint
from trainwell.training.run import train

pytestmark = pytest.mark.engine

# Dropout draws from the RNG a resume restores; the LR falls every 3 optimizer steps, so a
# resume from any step checkpoint lands mid-schedule.
RUN = [*IN_PROCESS_RUN, *OWNED, "model.net.dropout=0.1", "model.scheduler.step_size=3"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("full") / "run"
    every_step = ["callbacks.step_checkpoint.every_n_train_steps=1"]
    train(compose_config([*RUN, *every_step, "callbacks.step_checkpoint.save_top_k=-1"], run_dir))
    return run_dir


@pytest.mark.parametrize("step", [2, 5, 7])  # mid-epoch 0, first and last window of epoch 1
def test_resume_from_a_step_checkpoint_is_bitwise_exact(
    uninterrupted: Path, tmp_path: Path, step: int
) -> None:
    source = uninterrupted / "checkpoints" / f"step-{step:07d}.ckpt"
    run_dir = tmp_path / "resumed"
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(source, run_dir / "checkpoints" / source.name)
    resumed = train(compose_config([*RUN, "resume=auto"], run_dir))
    got = load_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert_bitwise_equal(got, load_checkpoint(uninterrupted / "checkpoints" / "last.ckpt"))
    want = json.loads((uninterrupted / "results.json").read_text())
    assert_same_results_elsewhere(resumed, want)  # epoch means and val/acc_best included


def test_no_step_checkpoint_at_an_epochs_last_batch(uninterrupted: Path) -> None:
    # Step 4 ends epoch 0 (its tail window): a resume from there would skip epoch 0's
    # validation, so that step is left to the end-of-epoch checkpoint.
    steps = sorted(p.name for p in (uninterrupted / "checkpoints").glob("step-*.ckpt"))
    assert steps == [f"step-{s:07d}.ckpt" for s in (1, 2, 3, 5, 6, 7)]


def test_checkpoints_carry_rng_loader_position_metrics_and_batch_arithmetic(
    uninterrupted: Path,
) -> None:
    state = load_checkpoint(uninterrupted / "checkpoints" / "step-0000002.ckpt")
    loader = state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert (loader["epoch"], loader["batches"]) == (0, 6)  # two windows of 3 micro-batches
    extra = state["callbacks"]["ExactResume"]
    assert set(extra["rng"]) >= {"python", "numpy", "torch"}
    # every metric's accumulated state, and what the run had logged so far
    assert {"train_loss", "val_acc_best"} <= set(extra["metrics"])
    last = load_checkpoint(uninterrupted / "checkpoints" / "last.ckpt")["callbacks"]["ExactResume"]
    assert "val/acc" in last["callback_metrics"]
    assert state["callbacks"]["TrainingPlanner"]["batch"] == {
        "micro_batch": 128,
        "accumulate": 3,
        "world_size": 1,
        "effective_batch": 384,
    }


def test_newest_checkpoint_is_the_furthest_state(uninterrupted: Path) -> None:
    ckpts = uninterrupted / "checkpoints"
    assert find_newest_checkpoint(ckpts) == ckpts / "last.ckpt"  # after the final validation


def test_changed_effective_batch_is_refused_before_training(
    uninterrupted: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(uninterrupted / "checkpoints", run_dir / "checkpoints")
    with pytest.raises(TrainwellError, match="effective batch changed on resume: 384"):
        train(compose_config([*RUN, "resume=auto", "data.batch_size=64"], run_dir))
