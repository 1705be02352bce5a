"""A refused run (exit 2, one line) leaves nothing new behind: no run dir holding only Hydra's
`.hydra/`, a lock and an empty log, and in a run dir that existed, the `.hydra/` config of the run
whose checkpoints sit there, not the refused command's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.scripts import call_script
from trainwell.io.refused_run import RunDirBefore

# Refused inside the job, after Hydra wrote into the run dir: a search started without -m.
REFUSED_IN_THE_JOB = "hparams_search=digits_optuna"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _old_run(run_dir: Path) -> dict[str, bytes]:
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 1  # the run's own config\n")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (run_dir / "train.log").write_text("epoch 1\n")
    (run_dir / ".lock").write_text("pid 1 on host a since then\n")
    return _tree(run_dir)


def test_a_run_refused_in_its_job_leaves_no_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "logs" / "train" / "runs" / "r1"
    proc = call_script("train.py", REFUSED_IN_THE_JOB, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "start it with -m" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nor the parents made for it


def test_a_run_refused_in_an_existing_run_dir_leaves_it_as_it_was(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    before = _old_run(run_dir)
    proc = call_script("train.py", REFUSED_IN_THE_JOB, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert _tree(run_dir) == before


@pytest.mark.engine
def test_bookkeeping_is_undone_only_when_the_refused_job_wrote_nothing_else(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    before = _old_run(run_dir)
    recorded = RunDirBefore.record(run_dir)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 2  # the refused command\n")
    (run_dir / ".hydra" / "overrides.yaml").write_text("- seed=2\n")
    with (run_dir / "train.log").open("a") as log:
        log.write("refused\n")
    (run_dir / ".lock").write_text("pid 2 on host b since now\n")
    recorded.undo_bookkeeping()
    assert _tree(run_dir) == before

    recorded = RunDirBefore.record(run_dir)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 3\n")
    (run_dir / "checkpoints" / "best.ckpt").write_bytes(b"new weights")  # the run's output
    recorded.undo_bookkeeping()
    assert (run_dir / ".hydra" / "config.yaml").read_text() == "seed: 3\n"
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()


@pytest.mark.engine
def test_a_new_run_dir_with_output_is_kept(tmp_path: Path) -> None:
    run_dir = tmp_path / "a" / "run"
    recorded = RunDirBefore.record(run_dir)
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (run_dir / "doctor").mkdir()
    (run_dir / "doctor" / "report.json").write_text("{}\n")  # a preflight's report: kept
    recorded.undo_bookkeeping()
    assert (run_dir / "doctor" / "report.json").is_file()
    (run_dir / "doctor" / "report.json").unlink()
    (run_dir / "doctor").rmdir()
    recorded.undo_bookkeeping()
    assert list(tmp_path.iterdir()) == []
