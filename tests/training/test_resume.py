"""Pre-emption (SIGTERM / SIGUSR1 -> checkpoint at a window boundary -> exit 3), resume=auto, DDP
kill + resume, and the logs a resumed run appends to. Real runs of scripts/train.py."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.config import REPO
from tests.helpers.kill_runs import ACCUMULATE, ENV, RUN
from tests.helpers.scripts import run_script
from tests.helpers.state import assert_bitwise_equal, final_state
from trainwell.callbacks.preemption import EXIT_PREEMPTED
from trainwell.training.resume import find_newest_checkpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    proc = run_script("train.py", *RUN, f"hydra.run.dir={run_dir}", env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return final_state(run_dir)


def killer(batch: int, sig: str, group: bool = False) -> list[str]:
    return [
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        f"+callbacks.killer.batch={batch}",
        f"+callbacks.killer.signal={sig}",
        f"+callbacks.killer.group={str(group).lower()}",
    ]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGUSR1"])
def test_signal_checkpoints_at_the_window_end_exits_3_and_resumes_exactly(
    tmp_path: Path, reference: dict, sig: str
) -> None:
    batch = 24  # epoch 1, batch 4: inside the window [3, 6) of that epoch
    run_dir = tmp_path / "run"
    proc = run_script("train.py", *RUN, *killer(batch, sig), f"hydra.run.dir={run_dir}", env=ENV)
    assert proc.returncode == EXIT_PREEMPTED, proc.stderr[-3000:]
    preempt = run_dir / "checkpoints" / "preempt.ckpt"
    line = [x for x in proc.stderr.splitlines() if x.startswith("pre-empted")][-1]
    assert line.startswith(f"pre-empted by {sig} at step ") and str(preempt) in line, line
    state = torch.load(preempt, map_location="cpu", weights_only=True)
    done = state["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"]
    assert done % ACCUMULATE == 0 and done > batch - 20  # saved at the end of that window
    resumed = run_script("train.py", *RUN, "resume=auto", f"hydra.run.dir={run_dir}", env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resume=auto: resuming from {preempt}" in resumed.stdout
    assert_bitwise_equal(final_state(run_dir), reference)
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    epochs = {row["epoch"] for row in rows if row.get("val/acc")}
    assert epochs == {"0", "1"}  # the first attempt's epoch-0 rows survived the resume


def test_resume_auto_prefers_training_progress_over_mtime(tmp_path: Path, reference: dict) -> None:
    run_dir = tmp_path / "run"
    steps = "callbacks.step_checkpoint.every_n_train_steps=3"
    proc = run_script("train.py", *RUN, steps, f"hydra.run.dir={run_dir}", env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpts = run_dir / "checkpoints"
    older = ckpts / "step-0000012.ckpt"
    older.touch()  # newest mtime, but 2 optimizer steps behind last.ckpt
    newest = find_newest_checkpoint(ckpts)
    assert newest is not None and newest != older
    assert torch.load(newest, weights_only=True)["global_step"] == reference["global_step"] == 14


def _ddp_run(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """ddp_sim (2 gloo ranks) in its own session, so a group kill takes both ranks, not pytest."""
    overrides = [*RUN, "trainer=ddp_sim", "trainer.deterministic=true", *extra]
    return subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "train.py"),
            *overrides,
            f"hydra.run.dir={run_dir}",
        ],
        cwd=REPO,
        env={**os.environ, **ENV, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=900,
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def ddp_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reference_dir = tmp_path_factory.mktemp("ddp") / "uninterrupted"
    proc = _ddp_run(reference_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return reference_dir


# 20 batches of 64 dealt to 2 ranks: 10 micro-batches each, windows [0,3) [3,6) [6,9) [9]. Batch 7
# is inside a window; batch 9 ends the epoch, where rank 1's last batch holds 41 samples, draws
# fewer dropout masks than rank 0's and the ranks' RNG streams part: each needs its own back.
@pytest.mark.parametrize("batch", [7, 9])
def test_ddp_sigkill_then_resume_gives_the_same_weights(
    tmp_path: Path, ddp_reference: Path, batch: int
) -> None:
    reference_dir = ddp_reference
    run_dir = tmp_path / "killed"
    killed = _ddp_run(
        run_dir,
        "callbacks.step_checkpoint.every_n_train_steps=1",
        *killer(batch, "SIGKILL", group=True),
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = _ddp_run(run_dir, "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume=auto: resuming from" in resumed.stdout
    assert_bitwise_equal(final_state(run_dir), final_state(reference_dir))


def test_a_signal_at_an_epochs_last_batch_stops_after_its_validation(
    tmp_path: Path, reference: dict
) -> None:
    """A pre-emption checkpoint at the last batch, before the epoch's validation, would resume
    past that validation: the callback stops at the epoch's end instead, and results match."""
    run_dir = tmp_path / "run"
    proc = run_script("train.py", *RUN, *killer(19, "SIGUSR1"), f"hydra.run.dir={run_dir}", env=ENV)
    assert proc.returncode == EXIT_PREEMPTED, proc.stderr[-3000:]
    state = torch.load(
        run_dir / "checkpoints" / "preempt.ckpt", map_location="cpu", weights_only=True
    )
    assert state["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"] == 1  # epoch 0 ran
    resumed = run_script("train.py", *RUN, "resume=auto", f"hydra.run.dir={run_dir}", env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_bitwise_equal(final_state(run_dir), reference)
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    assert {row["epoch"] for row in rows if row.get("val/acc")} == {"0", "1"}  # both validated


def test_resuming_finished_training_rewrites_a_last_ckpt_whose_write_was_lost(
    tmp_path: Path, reference: dict
) -> None:
    """A kill after the final best.ckpt reached the disk but before last.ckpt did: resume=auto
    continues from best.ckpt with no training left, and last.ckpt must still end up final."""
    run_dir = tmp_path / "run"
    ckpts = run_dir / "checkpoints"
    run = [*RUN, "callbacks.step_checkpoint.every_n_train_steps=3", f"hydra.run.dir={run_dir}"]
    finished = run_script("train.py", *run, env=ENV)
    assert finished.returncode == 0, finished.stderr[-3000:]
    want_results = json.loads((run_dir / "results.json").read_text())["metrics"]
    best = torch.load(ckpts / "best.ckpt", map_location="cpu", weights_only=True)
    assert best["global_step"] == reference["global_step"]  # the last epoch is the best one

    # last.ckpt as the lost write left it: an older state (here the step-12 checkpoint's).
    (ckpts / "last.ckpt").write_bytes((ckpts / "step-0000012.ckpt").read_bytes())
    (run_dir / "results.json").unlink()
    resumed = run_script("train.py", *run, "resume=auto", env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resume=auto: resuming from {ckpts / 'best.ckpt'}" in resumed.stdout
    assert_bitwise_equal(final_state(run_dir), reference)
    assert json.loads((run_dir / "results.json").read_text())["metrics"] == want_results
