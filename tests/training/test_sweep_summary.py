"""Multirun summaries through the real scripts: `train.py -m seed=1,2,3 model.optimizer.lr=...`
writes summary.json / summary.md / summary.png as its jobs end, scripts/summarize.py rebuilds them
from a copy, and a sweep killed mid-way then relaunched ends with the summary of one that never
stopped. The summary's arithmetic on prepared dirs: tests/summary/test_summary.py."""

from __future__ import annotations

import json
import shutil
import signal
import statistics
from pathlib import Path

import pytest

from tests.helpers.config import QUIET_RUN
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_script
from trainwell.summary.jobs import NOT_FINISHED

SWEEP = ["-m", "seed=1,2,3", "model.optimizer.lr=0.001,0.003", "trainer.max_epochs=2"]
# A few batches per stage: the default suite's sweep of six jobs in seconds.
TINY = [
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "print_config=false",
]


def _from_jobs(root: Path, jobs: list[str], metric: str) -> tuple[float, float]:
    values = [
        json.loads((root / job / "results.json").read_text())["metrics"][metric] for job in jobs
    ]
    return statistics.mean(values), statistics.stdev(values)


def _check_groups_of_three(root: Path) -> dict:
    summary = json.loads((root / "summary.json").read_text())
    assert len(summary["groups"]) == 2 and summary["jobs"] == {"done": 6, "failed": 0, "missing": 0}
    for group, lr in zip(
        sorted(summary["groups"], key=lambda g: g["overrides"]["model.optimizer.lr"]),
        ("0.001", "0.003"),
        strict=True,
    ):
        assert group["overrides"]["model.optimizer.lr"] == lr and group["n"] == 3
        for job in group["jobs"]:
            overrides = (root / job / ".hydra" / "overrides.yaml").read_text()
            assert f"model.optimizer.lr={lr}" in overrides
        mean, std = _from_jobs(root, group["jobs"], "test/acc")
        assert abs(group["metrics"]["test/acc"]["mean"] - mean) <= 1e-9
        assert abs(group["metrics"]["test/acc"]["std"] - std) <= 1e-9
    return summary


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The sweep's six jobs, one epoch each: the summary reads their results, whatever they are."""
    root = tmp_path_factory.mktemp("sweep") / "multirun"
    one_epoch = [o for o in SWEEP if not o.startswith("trainer.max_epochs=")]
    proc = call_script(
        "train.py", *one_epoch, "trainer.max_epochs=1", *TINY, *QUIET_RUN[1:],
        f"hydra.sweep.dir={root}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, proc.stdout


def test_a_sweep_of_seeds_and_lrs_gives_two_groups_of_three_from_the_jobs_results(
    sweep: tuple[Path, str],
) -> None:
    root, stdout = sweep
    # One dir per job, each with its own overrides (checked per group below).
    assert sorted(p.parent.name for p in root.glob("*/results.json")) == list("012345")
    summary = _check_groups_of_three(root)
    assert summary["sort"] == {"metric": "val/acc", "mode": "max"} and summary["pool"] == ["seed"]
    assert f"sweep summary: {root / 'summary.md'}" in stdout
    text = (root / "summary.md").read_text()
    assert text.count("\n| 0.00") == 2 and "\\begin{tabular}" in text
    assert (root / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summarize_rebuilds_a_copied_sweep_and_names_a_removed_job(
    sweep: tuple[Path, str], tmp_path: Path
) -> None:
    root, _ = sweep
    copy = tmp_path / "copied"
    shutil.copytree(root, copy)
    (copy / "summary.json").unlink()
    proc = call_script("summarize.py", str(copy))
    assert proc.returncode == 0, proc.stderr
    assert (copy / "summary.json").read_text() == (root / "summary.json").read_text()

    removed = json.loads((root / "summary.json").read_text())["groups"][0]["jobs"][1]
    shutil.rmtree(copy / removed)
    proc = call_script("summarize.py", str(copy))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((copy / "summary.json").read_text())
    (group,) = [g for g in summary["groups"] if removed in g["not_done"]]
    assert group["n"] == 2 and removed not in group["jobs"]
    mean, std = _from_jobs(copy, group["jobs"], "test/acc")
    assert abs(group["metrics"]["test/acc"]["mean"] - mean) <= 1e-9
    assert abs(group["metrics"]["test/acc"]["std"] - std) <= 1e-9
    assert [m["job"] for m in summary["missing"]] == [removed]
    assert f"missing: job {removed} (" in proc.stdout


@pytest.mark.slow
def test_the_measured_sweep_gives_two_groups_of_three(tmp_path: Path) -> None:
    """The command as written: six full digits runs of two epochs."""
    proc = run_script("train.py", *SWEEP, f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_groups_of_three(tmp_path)


# Killed and relaunched: exact resume needs the checkpoints of a kill/resume run.
RESUMABLE = [
    *SWEEP,
    *TINY[:3],
    "trainer.limit_train_batches=6",
    "trainer.deterministic=true",
    "callbacks.step_checkpoint.every_n_train_steps=2",
    *QUIET_RUN,
]


@pytest.mark.slow
def test_a_sweep_killed_mid_way_and_relaunched_ends_with_the_uninterrupted_summary(
    tmp_path: Path,
) -> None:
    reference, sweep = tmp_path / "uninterrupted", tmp_path / "killed"
    proc = run_script("train.py", *RESUMABLE, f"hydra.sweep.dir={reference}")
    assert proc.returncode == 0, proc.stderr[-3000:]

    killer = [
        "+callbacks.killer._target_=tests.helpers.sweeps.KillInJob",
        "+callbacks.killer.job=3",
        "+callbacks.killer.where=${paths.output_dir}",
        "+callbacks.killer.batch=8",  # epoch 2 of job 3, after a step checkpoint
    ]
    killed = run_script(
        "train.py", *RESUMABLE, *killer, f"hydra.sweep.dir={sweep}", env=TESTS_IMPORTABLE
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    # The summary the sweep left, written as job 2 ended: three jobs done, three to come.
    partial = json.loads((sweep / "summary.json").read_text())
    assert partial["jobs"] == {"done": 3, "failed": 0, "missing": 3}
    # Rebuilt now: job 3 has a dir and no results, 4 and 5 are not there.
    proc = call_script("summarize.py", str(sweep))
    assert proc.returncode == 0, proc.stderr
    rebuilt = json.loads((sweep / "summary.json").read_text())
    assert [(j["job"], j["cause"]) for j in rebuilt["failed"]] == [("3", NOT_FINISHED)]
    assert [j["job"] for j in rebuilt["missing"]] == ["4", "5"]

    relaunched = run_script("train.py", *RESUMABLE, "resume=auto", f"hydra.sweep.dir={sweep}")
    assert relaunched.returncode == 0, relaunched.stderr[-3000:]
    assert "nothing to train" in relaunched.stdout  # the finished jobs were not trained again
    want = _check_groups_of_three(reference)
    assert json.loads((sweep / "summary.json").read_text()) == want
    assert (sweep / "summary.md").read_text() == (reference / "summary.md").read_text()
