"""Pre-emption in-process (default suite): the run signals itself with SIGTERM at a known
micro-batch, through the real handler; the slow SLURM and torchrun tests do it from outside.

1257 digits / 128 = 10 micro-batches per epoch; K=3 -> windows of 3, 3, 3 and a tail of 1.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.config import compose_config
from tests.helpers.kill_runs import IN_PROCESS_RUN
from tests.helpers.state import assert_bitwise_equal, load_checkpoint
from tests.helpers.suggestions import after, overrides_in
from trainwell.callbacks.preemption import EXIT_PREEMPTED, Preempted
from trainwell.training.run import train

RUN = IN_PROCESS_RUN


def _sigterm_at(batch: int, phase: str) -> list[str]:
    killer = "+callbacks.killer"
    return [
        f"{killer}._target_=tests.helpers.killer.KillAt",
        f"{killer}.batch={batch}",
        f"{killer}.phase={phase}",
        f"{killer}.signal=SIGTERM",
    ]


def _preempt(run_dir: Path, batch: int, phase: str) -> dict:
    with pytest.raises(Preempted) as stopped:
        train(compose_config([*RUN, *_sigterm_at(batch, phase)], run_dir))
    assert stopped.value.code == EXIT_PREEMPTED
    (run_dir.parent / "preempted.txt").write_text(stopped.value.message)  # the line it printed
    return load_checkpoint(run_dir / "checkpoints" / "preempt.ckpt")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("full") / "run"
    train(compose_config(RUN, run_dir))
    return run_dir


@pytest.fixture(scope="module")
def preempted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A run that got SIGTERM after micro-batch 4, the middle of the second window (3, 4, 5)."""
    run_dir = tmp_path_factory.mktemp("preempted") / "run"
    return run_dir, _preempt(run_dir, batch=4, phase="batch_end")


def test_a_signal_mid_window_stops_at_the_windows_end(preempted: tuple[Path, dict]) -> None:
    _, state = preempted
    loader = state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert (state["global_step"], loader["epoch"], loader["batches"]) == (2, 0, 6)


def test_a_preempted_run_resumes_to_the_uninterrupted_weights_and_results(
    preempted: tuple[Path, dict], uninterrupted: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(preempted[0], run_dir)
    # The command line again, with what the pre-emption line says to continue with.
    said = (preempted[0].parent / "preempted.txt").read_text()
    (continued,) = overrides_in(after(said, "continue with"))
    resumed = train(compose_config([*RUN, continued], run_dir))
    assert_bitwise_equal(
        load_checkpoint(run_dir / "checkpoints" / "last.ckpt"),
        load_checkpoint(uninterrupted / "checkpoints" / "last.ckpt"),
    )
    want = json.loads((uninterrupted / "results.json").read_text())
    assert resumed["metrics"] == want["metrics"]


def test_a_signal_in_an_epochs_last_window_stops_after_its_validation(tmp_path: Path) -> None:
    # SIGTERM inside micro-batch 9, the tail window that ends epoch 0: a checkpoint right after
    # it would resume past epoch 0's validation, so the run stops once the epoch has ended.
    state = _preempt(tmp_path / "run", batch=9, phase="backward")
    assert state["global_step"] == 4
    assert "val/acc" in state["callbacks"]["ExactResume"]["callback_metrics"]


def test_a_signal_in_the_window_before_a_mid_epoch_validation_stops_after_it(
    tmp_path: Path,
) -> None:
    # Validation after micro-batch 6 (the second window's end): SIGTERM in batch 5 stops at the
    # next window end after that validation (step 3), never right before it.
    run_dir = tmp_path / "run"
    with pytest.raises(Preempted):
        train(
            compose_config(
                [*RUN, *_sigterm_at(5, "backward"), "trainer.val_check_interval=6"], run_dir
            )
        )
    state = load_checkpoint(run_dir / "checkpoints" / "preempt.ckpt")
    assert state["global_step"] == 3
    assert "val/acc" in state["callbacks"]["ExactResume"]["callback_metrics"]
