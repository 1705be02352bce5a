"""One writer per run dir, with real concurrent processes: a second launch into a dir in use
exits 2 at once naming the holder and changes nothing there, the holder finishes with the
results it would have had alone; a SIGKILLed holder never blocks its own resume=auto."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.config import REPO
from tests.helpers.kill_runs import ENV, RUN
from tests.helpers.scripts import run_script
from tests.helpers.state import assert_bitwise_equal, final_state, metrics

ONE_EPOCH = [*RUN, "trainer.max_epochs=1"]


def _snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file under the run dir with its size and modification time (ns)."""
    return {
        str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the first run ended early: {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


@pytest.mark.slow
def test_second_launch_exits_2_naming_the_holder_and_touches_nothing(tmp_path: Path) -> None:
    run_dir, marker, release = tmp_path / "run", tmp_path / "training", tmp_path / "go"
    gate = [
        "+callbacks.gate._target_=tests.helpers.gate.WaitForFile",
        f"+callbacks.gate.marker={marker}",
        f"+callbacks.gate.release={release}",
    ]
    first = subprocess.Popen(
        [sys.executable, str(REPO / "scripts/train.py"), *ONE_EPOCH, *gate,
         "resume=auto", f"hydra.run.dir={run_dir}"],
        cwd=REPO, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        _wait_for(marker, first)
        before = _snapshot(run_dir)
        second = run_script(
            "train.py", *ONE_EPOCH, "resume=auto", f"hydra.run.dir={run_dir}", env=ENV,
        )  # fmt: skip
        assert second.returncode == 2, second.stderr[-3000:]
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert f"pid {first.pid} on host {socket.gethostname()} since " in lines[0], lines[0]
        assert str(run_dir) in lines[0]
        assert _snapshot(run_dir) == before
        # At once: refused before Hydra started the job (which prints the run dir first), let
        # alone built a Trainer.
        assert "run dir:" not in second.stdout, second.stdout[-2000:]
    finally:
        release.write_text("go\n")
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]

    alone = tmp_path / "alone"
    proc = run_script("train.py", *ONE_EPOCH, f"hydra.run.dir={alone}", env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_bitwise_equal(final_state(run_dir), final_state(alone))
    assert metrics(run_dir) == metrics(alone)


@pytest.mark.slow
def test_a_sigkilled_holder_with_live_workers_never_blocks_its_resume(tmp_path: Path) -> None:
    """The holder dies with DataLoader workers still alive (they outlive it for a few seconds);
    resume=auto right after must take the dir and finish as the uninterrupted run does."""
    run_dir = tmp_path / "run"
    workers = ["data.num_workers=2", "data.persistent_workers=true"]
    killer = [
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        "+callbacks.killer.batch=5",
    ]
    killed = run_script(
        "train.py", *ONE_EPOCH, *workers, *killer, f"hydra.run.dir={run_dir}", env=ENV
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (run_dir / ".lock").exists()
    resumed = run_script(
        "train.py", *ONE_EPOCH, *workers, "resume=auto", f"hydra.run.dir={run_dir}", env=ENV
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    alone = tmp_path / "alone"
    proc = run_script("train.py", *ONE_EPOCH, *workers, f"hydra.run.dir={alone}", env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_bitwise_equal(final_state(run_dir), final_state(alone))
    assert metrics(run_dir) == metrics(alone)


def test_ranks_other_than_the_launch_never_take_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainwell.io.run_lock import lock_run_dir, release_run_dir, run_dir_lock

    for name, value in (("LOCAL_RANK", "1"), ("RANK", "3"), ("SLURM_PROCID", "1")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            with run_dir_lock(tmp_path / name):
                assert not (tmp_path / name / ".lock").exists()
    assert lock_run_dir(tmp_path / "mine")
    assert not lock_run_dir(tmp_path / "mine")  # held by this process already
    release_run_dir(tmp_path / "mine")
