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
import torch

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


# val/acc judged by its lowest value: the first validation is the best and every later one is
# worse, so a resumed run that forgot its best would take a later epoch's for it.
EARLY_BEST = [
    *RUN,
    "trainer.max_epochs=3",
    "monitor.metric=val/acc",
    "monitor.mode=min",
    "test=true",
]


@pytest.fixture(scope="module")
def early_best(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("early") / "run"
    every_step = ["callbacks.step_checkpoint.every_n_train_steps=1"]
    keep = ["callbacks.step_checkpoint.save_top_k=-1"]
    results = train(compose_config([*EARLY_BEST, *every_step, *keep], run_dir))
    assert results["best_epoch"]["epoch"] == 0, results["best_epoch"]
    assert results["metrics_last"]["val/acc"] > results["metrics"]["val/acc"]
    return run_dir


@pytest.mark.parametrize("how", ["moved", "resumed into a new dir"])
def test_a_run_continued_in_another_dir_keeps_its_best(
    early_best: Path, tmp_path: Path, how: str
) -> None:
    """Moved whole (its best.ckpt beside the checkpoint resumed), or resumed from its old
    checkpoint into a new run dir (best.ckpt still in the old one): the best score, best.ckpt and
    the test of it are the uninterrupted run's, not a later and worse epoch's."""
    run_dir = tmp_path / "elsewhere"
    (run_dir / "checkpoints").mkdir(parents=True)
    source = early_best / "checkpoints" / "step-0000006.ckpt"  # mid epoch 1
    shutil.copy(source, run_dir / "checkpoints" / source.name)
    if how == "moved":
        shutil.copy(early_best / "checkpoints" / "best.ckpt", run_dir / "checkpoints" / "best.ckpt")
    resumed = train(compose_config([*EARLY_BEST, "resume=auto"], run_dir))
    want = json.loads((early_best / "results.json").read_text())
    assert_same_results_elsewhere(resumed, want)  # test/* included: best.ckpt's
    assert resumed["best_ckpt"] == str(run_dir / "checkpoints" / "best.ckpt")
    best = load_checkpoint(run_dir / "checkpoints" / "best.ckpt")
    assert (
        best["global_step"]
        == load_checkpoint(early_best / "checkpoints" / "best.ckpt")["global_step"]
    )


def test_a_best_that_cannot_be_found_is_said_and_restarts(
    early_best: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run went on after the checkpoint resumed and its best.ckpt is now a later best: that
    file is not the best the checkpoint records, so it is not carried; the best restarts at the
    next validation and the run says so."""
    old = tmp_path / "old"
    shutil.copytree(early_best, old)
    checkpoint = torch.load(old / "checkpoints" / "step-0000006.ckpt", weights_only=False)
    for state in checkpoint["callbacks"].values():  # the records name the copy's files
        for key, value in list(state.items()):
            if isinstance(value, str):
                state[key] = value.replace(str(early_best), str(old))
        if isinstance(state.get("best_k_models"), dict):
            state["best_k_models"] = {
                k.replace(str(early_best), str(old)): v for k, v in state["best_k_models"].items()
            }
    source = tmp_path / "step-0000006.ckpt"
    torch.save(checkpoint, source)
    shutil.copy(old / "checkpoints" / "last.ckpt", old / "checkpoints" / "best.ckpt")
    capsys.readouterr()
    train(compose_config([*EARLY_BEST, f"ckpt_path={source}"], tmp_path / "new"))
    printed = capsys.readouterr().out
    assert "checkpoints: the best by val/acc" in printed and "the best restarts" in printed
