"""results.json's val/* are the values of the epoch the best checkpoint holds (the one the test
stage, predict and export use), the last epoch's beside them under `metrics_last`; a resumed
run reports the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.scripted import SCRIPTED_VAL_MAE, SCRIPTED_VAL_RMSE, scripted_mae_cfg
from trainwell.training.run import train

KEEP_EVERY_STEP = [
    "callbacks.step_checkpoint.every_n_train_steps=1",
    "callbacks.step_checkpoint.save_top_k=-1",
]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("best") / "run"
    train(scripted_mae_cfg(run_dir, *KEEP_EVERY_STEP))
    return run_dir


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def test_results_hold_the_best_epochs_validation_values(uninterrupted: Path) -> None:
    results = _results(uninterrupted)
    assert results["metrics"]["val/mae"] == SCRIPTED_VAL_MAE[1] == 3.0
    assert results["metrics"]["val/rmse"] == SCRIPTED_VAL_RMSE[1]
    assert results["best_epoch"] == {"epoch": 1, "step": 8}
    assert results["metrics_last"] == {"val/mae": 6.0, "val/rmse": SCRIPTED_VAL_RMSE[3]}
    assert results["finished_at"]["epoch"] == 4  # the best is not the last epoch


@pytest.mark.parametrize("step", [6, 11])  # mid-epoch 1 (before the best), mid-epoch 2 (after)
def test_a_resumed_run_reports_the_same_best_epoch(
    uninterrupted: Path, tmp_path: Path, step: int
) -> None:
    # The run dir as a kill right after step `step` leaves it: that step's checkpoint newest,
    # best.ckpt as of then, no results.json; resume=auto continues from the step checkpoint.
    run_dir = tmp_path / "resumed"
    train(scripted_mae_cfg(run_dir, *KEEP_EVERY_STEP))
    checkpoints = run_dir / "checkpoints"
    for later in [*checkpoints.glob("step-*.ckpt"), checkpoints / "last.ckpt"]:
        if later.name != f"step-{step:07d}.ckpt":
            later.unlink()
    if step < 8:  # epoch 1's validation (the best) comes after the kill
        (checkpoints / "best.ckpt").unlink()
    (run_dir / "results.json").unlink()
    train(scripted_mae_cfg(run_dir, *KEEP_EVERY_STEP, "resume=auto"))
    want, got = _results(uninterrupted), _results(run_dir)
    for key in ("metrics", "best_epoch", "metrics_last", "finished_at"):
        assert got[key] == want[key], key
