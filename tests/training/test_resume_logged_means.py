"""A module that logs plain tensors with on_epoch=True (docs/your-project.md's own example does)
must report the same epoch values after a mid-epoch resume as the uninterrupted run: Lightning's
running sums behind them come back from the checkpoint (ExactResume, compat.epoch_sums), and a
checkpoint written after an epoch's last batch does not carry them into the next epoch."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers.plain_means import BATCHES_PER_EPOCH, PLAIN_MEANS_CLI, plain_means_cfg
from tests.helpers.scripts import TESTS_IMPORTABLE, run_script
from tests.helpers.state import assert_bitwise_equal, assert_same_results_elsewhere, final_state
from trainwell.training.run import train

EPOCHS = ["trainer.max_epochs=2"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("full") / "run"
    every_step = [
        "callbacks.step_checkpoint.every_n_train_steps=1",
        "callbacks.step_checkpoint.save_top_k=-1",
    ]
    return run_dir, train(plain_means_cfg(run_dir, *EPOCHS, *every_step))


def epoch_rows(run_dir: Path) -> dict[int, dict[str, str]]:
    """The train/* values the CSV logger wrote at each epoch's end, as written (exact)."""
    path = run_dir / "csv" / "metrics.csv"
    if not path.exists():  # a resume that logs nothing writes no file
        return {}
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss_epoch")]
    return {
        int(r["epoch"]): {k: v for k, v in r.items() if k.startswith("train/") and v} for r in rows
    }


@pytest.mark.parametrize(
    ("checkpoint", "epochs_logged"),
    [
        ("step-0000003.ckpt", [0, 1]),  # mid-epoch 0
        ("step-0000008.ckpt", [1]),  # mid-epoch 1, the last: its means are the results'
        ("best.ckpt", [1]),  # after epoch 0's last batch: its sums must not reach epoch 1
        ("last.ckpt", []),  # after the last batch of training: results from the checkpoint
    ],
)
def test_epoch_means_of_plain_tensors_survive_a_resume(
    uninterrupted: tuple[Path, dict], tmp_path: Path, checkpoint: str, epochs_logged: list[int]
) -> None:
    full, want = uninterrupted
    run_dir = tmp_path / "resumed"
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(full / "checkpoints" / checkpoint, run_dir / "checkpoints" / "last.ckpt")
    got = train(plain_means_cfg(run_dir, *EPOCHS, "resume=auto"))
    assert_bitwise_equal(final_state(run_dir), final_state(full))
    assert_same_results_elsewhere(got, want)
    logged, full_logged = epoch_rows(run_dir), epoch_rows(full)
    assert sorted(logged) == epochs_logged
    for epoch in epochs_logged:
        assert logged[epoch] == full_logged[epoch], epoch


def test_the_uninterrupted_run_logs_what_the_resume_must_match(
    uninterrupted: tuple[Path, dict],
) -> None:
    # The comparison above means something only if the keys it covers are there, with
    # reductions that differ from one another.
    full, want = uninterrupted
    rows = epoch_rows(full)
    assert sorted(rows) == [0, 1]
    keys = {"train/loss_epoch", "train/loss_max", "train/loss_sum", "train/weighted_epoch"}
    assert keys | {"train/metric_loss"} <= set(rows[1])
    assert len({rows[1][k] for k in keys}) == len(keys)
    assert {"train/loss", "train/loss_epoch", "train/weighted"} <= set(want["metrics"])


def test_a_checkpoint_carries_the_running_sums_only_mid_epoch(
    uninterrupted: tuple[Path, dict],
) -> None:
    full, _ = uninterrupted

    def sums(name: str) -> dict:
        state = torch.load(full / "checkpoints" / name, map_location="cpu", weights_only=True)
        (mine,) = state["callbacks"]["ExactResume"]["epoch_sums_per_rank"]
        return {s["key"]: s for s in mine}

    mid = sums("step-0000003.ckpt")  # 3 of epoch 0's 6 batches
    assert set(mid) == {
        "training_step.train/loss",
        "training_step.train/loss_max",
        "training_step.train/loss_sum",
        "training_step.train/weighted",
        "training_step.train/loss_synced",
    }  # the torchmetrics Metric has its own restore
    assert int(mid["training_step.train/loss"]["states"]["cumulated_batch_size"]) == 3 * 4
    assert BATCHES_PER_EPOCH > 3
    assert sums("best.ckpt") == {}  # written after epoch 0's last batch


@pytest.mark.slow
def test_each_rank_resumes_its_own_running_sums(tmp_path: Path) -> None:
    """2 gloo ranks, 3 batches each per epoch: a mean logged with sync_dist=True adds both
    ranks' running sums at the epoch's end, so each rank must get its own back (rank 0's on
    both would count rank 0's batches twice); a torchmetrics Metric likewise."""
    ddp = (*PLAIN_MEANS_CLI, "trainer=ddp_sim", *EPOCHS)
    full = tmp_path / "full"
    every_step = (
        "callbacks.step_checkpoint.every_n_train_steps=1",
        "callbacks.step_checkpoint.save_top_k=-1",
    )
    run_in(full, *ddp, *every_step)
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    # step 5: the second of epoch 1's three batches
    shutil.copy(full / "checkpoints" / "step-0000005.ckpt", resumed / "checkpoints" / "last.ckpt")
    run_in(resumed, *ddp, "resume=auto")
    assert_bitwise_equal(final_state(resumed), final_state(full))
    want = json.loads((full / "results.json").read_text())
    assert {"train/loss_synced", "train/metric_loss"} <= set(want["metrics"])
    assert_same_results_elsewhere(json.loads((resumed / "results.json").read_text()), want)


def run_in(run_dir: Path, *overrides: str) -> None:
    proc = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}", env=TESTS_IMPORTABLE)
    assert proc.returncode == 0, proc.stderr[-3000:]
