"""EMA through SIGKILLs: a run with `ema.decay` killed at 3 seeded moments and resumed with
resume=auto ends with the averaged weights, the trained weights and the update count bitwise
those of the uninterrupted run, and the same results.json metrics.

The run of test_kill_resume.py (digits, micro-batch 64 x accumulate 3, 2 epochs, step
checkpoints every 2 optimizer steps, dropout on); the moments: a batch end inside an
accumulation window, inside a training step (before backward) and halfway through a
checkpoint write, all mid-epoch.
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

EMA_RUN = [*RUN, "ema.decay=0.9"]


def _mid_window(batch: int) -> bool:
    """Micro-batch `batch` (0-based over the run) ends no optimizer step."""
    index = batch % BATCHES_PER_EPOCH
    return bool((index + 1) % ACCUMULATE) and index != BATCHES_PER_EPOCH - 1


def kill_points() -> list[tuple[str, int]]:
    rng = random.Random(57)
    mid_window = [b for b in range(1, EPOCHS * BATCHES_PER_EPOCH - 1) if _mid_window(b)]
    return [
        ("batch_end", rng.choice(mid_window)),
        ("backward", rng.randrange(1, EPOCHS * BATCHES_PER_EPOCH - 1)),
        ("save", rng.randrange(1, 6)),
    ]


def _kill_and_resume(tmp_path: Path, phase: str, index: int) -> tuple[dict, dict]:
    run_dir = tmp_path / f"{phase}-{index}"
    killer = [
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        f"+callbacks.killer.batch={index}",
        f"+callbacks.killer.phase={phase}",
    ]
    killed = run_script("train.py", *EMA_RUN, *killer, f"hydra.run.dir={run_dir}", env=ENV)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (run_dir / "results.json").exists()
    resumed = run_script("train.py", *EMA_RUN, "resume=auto", f"hydra.run.dir={run_dir}", env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return final_state(run_dir), metrics(run_dir)


@pytest.mark.slow
def test_sigkill_at_3_moments_then_resume_gives_the_same_average_and_weights(
    tmp_path: Path,
) -> None:
    reference = tmp_path / "uninterrupted"
    proc = run_script("train.py", *EMA_RUN, f"hydra.run.dir={reference}", env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want, want_metrics = final_state(reference), metrics(reference)
    steps = EPOCHS * 7  # ceil(20 / 3) optimizer steps per epoch
    assert int(want["averaging_state"]["n_averaged"]) == want["global_step"] == steps
    differ = max(
        (want["state_dict"][k] - want["current_model_state"][k]).abs().max().item()
        for k in want["state_dict"]
        if want["state_dict"][k].is_floating_point()
    )
    assert differ > 1e-3  # the average is not the weights

    points = kill_points()
    assert points[0][0] == "batch_end" and _mid_window(points[0][1])
    with ThreadPoolExecutor(max_workers=2) as pool:  # 2 cores: two runs at a time
        futures = {p: pool.submit(_kill_and_resume, tmp_path, *p) for p in points}
        results = {p: f.result() for p, f in futures.items()}
    for point, (got, got_metrics) in results.items():
        try:
            assert_bitwise_equal(got, want)  # state_dict (the average), optimizer, schedule
            for name, value in want["current_model_state"].items():
                assert torch.equal(got["current_model_state"][name], value), name
            assert torch.equal(
                got["averaging_state"]["n_averaged"], want["averaging_state"]["n_averaged"]
            )
            assert got["callbacks"]["ExactEMA"] == want["callbacks"]["ExactEMA"]
            assert got_metrics == want_metrics
        except AssertionError as err:
            raise AssertionError(f"resume after kill at {point} diverged: {err}") from err
