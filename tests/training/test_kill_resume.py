"""SIGKILL a real training run at 12 seeded moments, resume each with resume=auto, demand
bitwise-equal weights and an identical results.json metrics dict.

Digits, micro-batch 64 x accumulate 3 (20 micro-batches/epoch: windows of 3 and a 2-batch tail
window), 2 epochs, step checkpoints every 2 optimizer steps, CPU, trainer.deterministic=true,
dropout on (so RNG restore is exercised). The moments span the whole run: the first batch,
mid-accumulation-window batches, inside a training step (before backward), halfway through a
checkpoint write, right after the first (then best) epoch, after the last training step, during
testing and halfway through writing results.json.
"""

from __future__ import annotations

import random
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests.helpers.kill_runs import ACCUMULATE, BATCHES_PER_EPOCH, ENV, EPOCHS, RUN
from tests.helpers.scripts import run_script
from tests.helpers.state import assert_bitwise_equal, final_state, metrics


def kill_points() -> list[tuple[str, int]]:
    """12 seeded moments: (phase, index); see tests/helpers/killer.py for the phases."""
    rng = random.Random(20261122)
    batches = rng.sample(range(1, EPOCHS * BATCHES_PER_EPOCH - 1), 4)
    points = [("batch_end", 0)] + [("batch_end", b) for b in batches[:3]]
    points += [("backward", batches[3]), ("save", rng.randrange(1, 6))]
    points += [("epoch_start", 1), ("train_end", 0), ("test_batch", 0), ("test_batch", 3)]
    points += [("results", 0), ("save", rng.randrange(6, 10))]
    return points


def kill_and_resume(tmp_path: Path, phase: str, index: int) -> tuple[dict, dict]:
    run_dir = tmp_path / f"{phase}-{index}"
    killer = [
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        f"+callbacks.killer.batch={index}",
        f"+callbacks.killer.phase={phase}",
    ]
    killed = run_script("train.py", *RUN, *killer, f"hydra.run.dir={run_dir}", env=ENV)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    ckpt_dir = run_dir / "checkpoints"
    if phase == "save":
        # The half-written file is the temp file; every real checkpoint still loads.
        assert list(ckpt_dir.glob(".*.tmp")), sorted(p.name for p in ckpt_dir.iterdir())
        for path in ckpt_dir.glob("*.ckpt"):
            torch.load(path, map_location="cpu", weights_only=True)
    assert not (run_dir / "results.json").exists()
    resumed = run_script("train.py", *RUN, "resume=auto", f"hydra.run.dir={run_dir}", env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return final_state(run_dir), metrics(run_dir)


@pytest.mark.slow
def test_kill_points_cover_the_interesting_moments() -> None:
    points = kill_points()
    assert len(points) == 12
    mid_window = [b for p, b in points if p == "batch_end" and (b + 1) % ACCUMULATE != 0]
    assert mid_window, points  # at least one kill inside an accumulation window
    assert any(p == "backward" for p, _ in points) and any(p == "save" for p, _ in points)


@pytest.mark.slow
def test_sigkill_at_12_moments_then_resume_gives_equal_weights_and_results(
    tmp_path: Path,
) -> None:
    reference_dir = tmp_path / "uninterrupted"
    proc = run_script("train.py", *RUN, f"hydra.run.dir={reference_dir}", env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = final_state(reference_dir)
    want_metrics = metrics(reference_dir)
    assert want["global_step"] == EPOCHS * 7  # ceil(20 / 3) optimizer steps per epoch
    assert {"test/acc", "val/acc_best", "train/loss"} <= set(want_metrics)

    with ThreadPoolExecutor(max_workers=2) as pool:  # 2 cores: two runs at a time
        futures = {point: pool.submit(kill_and_resume, tmp_path, *point) for point in kill_points()}
        results = {point: future.result() for point, future in futures.items()}
    for point, (got, got_metrics) in results.items():
        try:
            assert_bitwise_equal(got, want)
            assert got_metrics == want_metrics
        except AssertionError as err:
            raise AssertionError(f"resume after kill at {point} diverged: {err}") from err
