"""Cross-validation through the real script: SIGKILLs inside a fold then resume=auto, and folds
run as separate jobs (`-m cv.fold=...`) joined by scripts/cv_assemble.py, each giving the same
oof_predictions.csv and results.json `cv` bytes as one uninterrupted run."""

from __future__ import annotations

import json
import random
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.cv import CV_RUN, read_bytes
from tests.helpers.scripts import TESTS_IMPORTABLE, run_script

FOLDS = 3  # fewer than the fast tests' 4: seven runs of every fold here
RUN = [*CV_RUN, f"cv.folds={FOLDS}"]
BATCHES_PER_FOLD = 10  # ceil(958 / 96): one epoch


def kill_points() -> list[tuple[int, str, int]]:
    """3 seeded moments: (fold, phase, index)."""
    rng = random.Random(20261126)
    return [
        (rng.randrange(FOLDS), "batch_end", rng.randrange(BATCHES_PER_FOLD - 1)),
        (rng.randrange(1, FOLDS), "backward", rng.randrange(BATCHES_PER_FOLD)),
        (rng.randrange(FOLDS), "save", rng.randrange(3)),
    ]


def _kill_and_resume(root: Path, fold: int, phase: str, index: int) -> tuple[bytes, str]:
    run_dir = root / f"{fold}-{phase}-{index}"
    killer = [
        "+callbacks.killer._target_=tests.helpers.cv.KillInFold",
        f"+callbacks.killer.fold={fold}",
        "+callbacks.killer.where=${paths.output_dir}",
        f"+callbacks.killer.batch={index}",
        f"+callbacks.killer.phase={phase}",
    ]
    env = TESTS_IMPORTABLE
    killed = run_script("train.py", *RUN, *killer, f"hydra.run.dir={run_dir}", env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (run_dir / "oof_predictions.csv").exists()
    assert not (run_dir / f"fold_{fold}" / "results.json").exists()
    resumed = run_script("train.py", *RUN, "resume=auto", f"hydra.run.dir={run_dir}", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return read_bytes(run_dir)


@pytest.mark.slow
def test_kills_inside_a_fold_then_resume_give_the_same_oof_file_and_cv_figures(
    tmp_path: Path,
) -> None:
    reference = tmp_path / "uninterrupted"
    proc = run_script("train.py", *RUN, f"hydra.run.dir={reference}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = read_bytes(reference)
    with ThreadPoolExecutor(max_workers=2) as pool:  # 2 cores: two runs at a time
        got = list(pool.map(lambda p: _kill_and_resume(tmp_path, *p), kill_points()))
    assert all(g == want for g in got)

    # The same folds as separate jobs (SLURM array tasks), then joined.
    sweep = tmp_path / "sweep"
    folds = ",".join(str(k) for k in range(FOLDS))
    jobs = run_script("train.py", "-m", *RUN, f"cv.fold={folds}", f"hydra.sweep.dir={sweep}")
    assert jobs.returncode == 0, jobs.stderr[-3000:]
    assert not (sweep / "oof_predictions.csv").exists()
    joined = run_script("cv_assemble.py", str(sweep))
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert f"run dir: {sweep}" in joined.stdout
    assert read_bytes(sweep) == want
    assert (sweep / "folds.json").read_bytes() == (reference / "folds.json").read_bytes()
    joined_results = json.loads((sweep / "results.json").read_text())
    assert sorted(joined_results["last_ckpt"]) == [f"fold_{k}" for k in range(FOLDS)]
    assert all(Path(p).is_file() for p in joined_results["last_ckpt"].values())
    again = run_script("cv_assemble.py", str(sweep / "0"))  # one fold alone is refused
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "fold(s) [1, 2] of 3 have no finished run" in again.stderr
