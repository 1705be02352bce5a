"""A checkpoint written before template callbacks were renamed (TrainingStateCallback ->
ExactResume, TrainingPlanCallback -> TrainingPlanner) resumes exactly: Lightning alone would
warn, drop their states, and resume without the saved RNG streams and metric states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers.config import compose_config
from tests.helpers.kill_runs import IN_PROCESS_RUN
from tests.helpers.state import assert_bitwise_equal, load_checkpoint
from trainwell.io.checkpoint_read import RENAMED_CALLBACKS
from trainwell.training.run import train

STEP = 5  # mid-epoch 1: RNG streams (dropout) and metric states both matter


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("full") / "run"
    train(
        compose_config(
            [
                *IN_PROCESS_RUN,
                "callbacks.step_checkpoint.every_n_train_steps=1",
                "callbacks.step_checkpoint.save_top_k=-1",
            ],
            run_dir,
        )
    )
    return run_dir


def _old_names(source: Path, target: Path) -> None:
    checkpoint = load_checkpoint(source)
    current = {new: old for old, new in RENAMED_CALLBACKS.items()}
    checkpoint["callbacks"] = {current.get(k, k): v for k, v in checkpoint["callbacks"].items()}
    assert set(RENAMED_CALLBACKS) <= set(checkpoint["callbacks"])
    target.parent.mkdir(parents=True)
    torch.save(checkpoint, target)


def test_a_checkpoint_with_the_old_callback_names_resumes_bitwise(
    uninterrupted: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "resumed"
    _old_names(
        uninterrupted / "checkpoints" / f"step-{STEP:07d}.ckpt",
        run_dir / "checkpoints" / f"step-{STEP:07d}.ckpt",
    )
    resumed = train(compose_config([*IN_PROCESS_RUN, "resume=auto"], run_dir))
    got = load_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert_bitwise_equal(got, load_checkpoint(uninterrupted / "checkpoints" / "last.ckpt"))
    want = json.loads((uninterrupted / "results.json").read_text())
    assert resumed["metrics"] == want["metrics"]


def test_without_the_mapping_lightning_drops_those_states(
    uninterrupted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the mapping prevents, so this file fails if Lightning starts matching the old
    names itself (then the mapping can go)."""
    import trainwell.io.checkpoint_read as read

    monkeypatch.setattr(read, "RENAMED_CALLBACKS", {})
    run_dir = tmp_path / "resumed"
    _old_names(
        uninterrupted / "checkpoints" / f"step-{STEP:07d}.ckpt",
        run_dir / "checkpoints" / f"step-{STEP:07d}.ckpt",
    )
    with pytest.warns(UserWarning, match="callbacks used to create the checkpoint"):
        train(compose_config([*IN_PROCESS_RUN, "resume=auto"], run_dir))
    got = load_checkpoint(run_dir / "checkpoints" / "last.ckpt")["state_dict"]
    want = load_checkpoint(uninterrupted / "checkpoints" / "last.ckpt")["state_dict"]
    assert any(not torch.equal(got[k], want[k]) for k in want)
