"""A real single-node SLURM cluster: sbatch scripts/slurm/train.sbatch with 2 tasks of CPU DDP,
SIGUSR1 mid-run, and the job must checkpoint, requeue itself and finish with the weights of an
uninterrupted run. And launcher=slurm (hydra-submitit-launcher): a 2-job sweep submitted as an
array, one job pre-empted with SIGUSR1, both complete with the same weights; an Optuna search whose
trials run as SLURM jobs, a failing one among them.

Setup installs Debian's slurm-wlm + munge when missing (needs root) and starts munged, slurmctld
and slurmd with scripts/slurm/local_cluster.sh; they are stopped by their pid files. When that is
impossible here the test skips with the exact reason; it never simulates SLURM.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.config import REPO
from tests.helpers.kill_runs import RUN
from tests.helpers.scripts import TESTS_IMPORTABLE
from tests.helpers.search import BRUTE_FORCE, TINY
from tests.helpers.state import assert_bitwise_equal, final_state

pytestmark = pytest.mark.slow

CLUSTER = REPO / "scripts" / "slurm" / "local_cluster.sh"
OVERRIDES = [
    *[o for o in RUN if not o.startswith(("trainer.max_epochs", "callbacks.step_checkpoint"))],
    "trainer=ddp_sim",
    "trainer.max_epochs=6",  # 4 optimizer steps per epoch on 2 ranks; long enough to interrupt
    "callbacks.step_checkpoint.every_n_train_steps=1",
]


def _install_slurm() -> str | None:
    """None when slurm is usable, else why not (the skip reason)."""
    if shutil.which("slurmctld") and shutil.which("slurmd") and shutil.which("munged"):
        return None
    if os.geteuid() != 0:
        return "slurm-wlm/munge are not installed and installing them needs root"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "slurm-wlm", "munge"]
    proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:  # stale package lists: update once and retry
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=900)
        proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        return f"apt-get install slurm-wlm munge failed: {tail}"
    return None


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    reason = _install_slurm()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    start = subprocess.run([str(CLUSTER), "start", str(state)], capture_output=True, text=True)
    try:
        if start.returncode != 0:
            logs = "; ".join(
                line
                for p in sorted(state.rglob("*.log"))
                for line in p.read_text().splitlines()[-2:]
            )
            pytest.skip(f"local SLURM cluster did not start: {start.stderr.strip()} ({logs})")
        yield {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run([str(CLUSTER), "stop", str(state)], check=True)


def _job_field(env: dict[str, str], job: str, field: str) -> str:
    shown = subprocess.run(
        ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
    ).stdout
    found = re.search(rf"\b{field}=(\S+)", shown)
    return found.group(1) if found else ""


FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def _settled_state(env: dict[str, str], job: str, timeout: float = 120) -> str:
    """The job's state once SLURM has finished with it: submitit's sweep returns as soon as the
    job's result file exists, while the job may still be RUNNING or COMPLETING for a few seconds."""
    _wait(
        f"job {job} to reach a final state",
        lambda: _job_field(env, job, "JobState") in FINAL_STATES,
        timeout,
    )
    return _job_field(env, job, "JobState")


# The signal must reach the run mid-training: a short CPU run can otherwise finish training first
# (tests/helpers/hold.py). PYTHONPATH lets the jobs import it; SLURM passes the environment on.
HOLD_ENV = TESTS_IMPORTABLE


def _hold(marker: Path, enabled: str = "true") -> list[str]:
    return [
        "+callbacks.hold._target_=tests.helpers.hold.HoldUntilSignalled",
        f"+callbacks.hold.marker={marker}",
        f"+callbacks.hold.enabled={enabled}",
    ]


def _wait(what: str, ready: callable, timeout: float) -> None:  # type: ignore[valid-type]
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)


def test_sigusr1_checkpoints_requeues_and_finishes_with_uninterrupted_weights(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    held = tmp_path / "held"
    reference_dir = tmp_path / "uninterrupted"
    reference = subprocess.Popen(  # the same 2 gloo ranks, outside SLURM, meanwhile
        [
            sys.executable,
            str(REPO / "scripts/train.py"),
            *OVERRIDES,
            f"hydra.run.dir={reference_dir}",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    submit = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--ntasks-per-node=2",
            "--cpus-per-task=1",
            f"--output={tmp_path}/job-%j.out",
            f"--chdir={REPO}",
            str(REPO / "scripts/slurm/train.sbatch"),
            *OVERRIDES,
            *_hold(held),
            f"paths.log_dir={logs}",
        ],
        env={**slurm_env, "PYTHON": sys.executable, **HOLD_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    job = submit.stdout.strip().split(";")[0]
    run_dir = logs / "train" / "runs" / f"slurm{job}"  # keyed by the job id: same after requeue
    out = tmp_path / f"job-{job}.out"
    try:
        ckpts = run_dir / "checkpoints"
        _wait("the run to be held at step 2", held.exists, 600)
        subprocess.run(["scancel", "--signal=USR1", job], env=slurm_env, check=True)
        _wait(
            "the requeued job to complete",
            lambda: _job_field(slurm_env, job, "JobState") in FINAL_STATES,
            900,
        )
    finally:
        if _job_field(slurm_env, job, "JobState") not in FINAL_STATES:
            subprocess.run(["scancel", job], env=slurm_env)
    text = out.read_text()
    assert _job_field(slurm_env, job, "JobState") == "COMPLETED", text[-3000:]
    assert _job_field(slurm_env, job, "Restarts") == "1", text[-3000:]
    # Held at step 2; the 2 ranks agree to stop at the epoch's end (4 optimizer steps per epoch).
    assert re.search(
        rf"pre-empted by SIGUSR1 at step 4: checkpoint {ckpts}/preempt.ckpt; "
        rf"scontrol requeue {job} -> exit 0",
        text,
    ), text[-3000:]
    assert f"job {job} restart 1" in text
    assert f"resume=auto: resuming from {ckpts}/preempt.ckpt" in text
    assert reference.wait(timeout=900) == 0, reference.stderr.read()[-3000:]
    assert_bitwise_equal(final_state(run_dir), final_state(reference_dir))


# Two identical jobs (the swept key, whether the run is held, changes nothing in training): the
# uninterrupted one is the reference for the pre-empted one. 4 epochs of 7 optimizer steps, a step
# checkpoint after each.
SWEEP = [
    *[o for o in RUN if not o.startswith(("trainer.max_epochs", "callbacks.step_checkpoint"))],
    "trainer.max_epochs=4",
    "callbacks.step_checkpoint.every_n_train_steps=1",
]


def test_submitit_sweep_runs_both_jobs_and_a_preempted_one_requeues_to_the_same_weights(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    held = tmp_path / "held"
    log = tmp_path / "sweep.log"
    with log.open("w") as out:
        parent = subprocess.Popen(  # the sweep waits for its SLURM jobs, as a user's would
            [
                sys.executable,
                str(REPO / "scripts/train.py"),
                "-m",
                "launcher=slurm",
                "hydra.launcher.cpus_per_task=1",
                f"hydra.sweep.dir={sweep}",
                *SWEEP,
                *_hold(held, "true,false"),  # the swept key: only job 0 is held and signalled
            ],
            cwd=REPO,
            env={**slurm_env, "PYTHONUNBUFFERED": "1", **HOLD_ENV},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        array = ""
        returncode = None
        try:
            ckpts = sweep / "0" / "checkpoints"
            _wait("job 0 to be held at step 2", held.exists, 600)
            (array,) = {p.name for p in (sweep / ".submitit").iterdir() if p.name.isdigit()}
            subprocess.run(["scancel", "--signal=USR1", f"{array}_0"], env=slurm_env, check=True)
            returncode = parent.wait(timeout=900)
        finally:
            # Cleanup only when the sweep did not succeed: submitit's parent returns as soon as
            # the result files exist, while the jobs may still be exiting, and a scancel then
            # would turn a finished job into CANCELLED.
            if returncode != 0:
                if parent.poll() is None:
                    os.killpg(parent.pid, 9)
                    parent.wait()
                if array:
                    subprocess.run(["scancel", array], env=slurm_env)
    assert returncode == 0, log.read_text()[-3000:]
    (script,) = (sweep / ".submitit").glob(".submission_file_*.sh")
    assert "#SBATCH --signal=USR1@90\n" in script.read_text()  # the time-limit warning
    assert "export SUBMITIT_PREEMPT_SIGNAL=USR1\n" in script.read_text()
    job0 = f"{array}_0"
    job_logs = "".join(p.read_text() for p in sorted((sweep / ".submitit" / job0).glob("*_log.*")))
    assert _settled_state(slurm_env, job0) == "COMPLETED", job_logs[-3000:]
    assert _job_field(slurm_env, job0, "Restarts") == "1", job_logs[-3000:]
    assert _settled_state(slurm_env, f"{array}_1") == "COMPLETED"
    assert _job_field(slurm_env, f"{array}_1", "Restarts") == "0"
    assert re.search(  # one process stops at the held step itself
        rf"pre-empted by SIGUSR1 at step 2: checkpoint {ckpts}/preempt.ckpt; "
        rf"scontrol requeue {job0} -> exit 0",
        job_logs,
    ), job_logs[-3000:]
    assert f"resume=auto: resuming from {ckpts}/preempt.ckpt" in job_logs
    for job in ("0", "1"):
        assert (sweep / job / "results.json").is_file()
    summary = json.loads((sweep / "summary.json").read_text())  # from the jobs' nodes and the sweep
    assert summary["jobs"] == {"done": 2, "failed": 0, "missing": 0}
    assert_bitwise_equal(final_state(sweep / "0"), final_state(sweep / "1"))


def test_optuna_trials_run_as_slurm_jobs_and_a_failed_one_is_recorded(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    import optuna
    from optuna.trial import TrialState

    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts/train.py"),
            "-m",
            "launcher=slurm",
            "hparams_search=digits_optuna",
            "hydra.launcher.cpus_per_task=1",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.n_jobs=2",  # trials 0-1 as one array, then trial 2
            f"hydra.sweep.dir={sweep}",
            *BRUTE_FORCE,
            "model.net.dropout=choice(0.1,1.5,0.2)",
            *TINY,
        ],
        cwd=REPO,
        env={**slurm_env, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    study = optuna.load_study(study_name="digits_optuna", storage=f"sqlite:///{sweep}/optuna.db")
    states = sorted(t.state.name for t in study.trials)
    assert states == ["COMPLETE", "COMPLETE", "FAIL"]
    for trial in study.trials:
        run_dir = sweep / str(trial.number)  # each trial ran in its own job, in its own dir
        assert trial.user_attrs["run_dir"] == str(run_dir)
        if trial.state == TrialState.FAIL:
            assert trial.params == {"model.net.dropout": 1.5}
            assert "dropout probability has to be between 0 and 1" in trial.user_attrs["failure"]
        else:
            metrics = json.loads((run_dir / "results.json").read_text())["metrics"]
            assert trial.value == metrics["val/loss"]
    # Each trial's end, on its node, updated the sweep's summary and recorded its failure.
    summary = json.loads((sweep / "summary.json").read_text())
    assert summary["study"]["trials"] == {"complete": 2, "failed": 1, "pruned": 0}
    (failed,) = summary["failed"]
    assert "dropout probability has to be between 0 and 1" in failed["cause"]
    assert (sweep / failed["job"] / "failure.txt").read_text().strip() == failed["cause"]
    arrays = {p.name for p in (sweep / ".submitit").iterdir() if p.name.isdigit()}
    assert len(arrays) == 2  # two submissions: a batch of 2 trials, then the last one
