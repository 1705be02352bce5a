"""launcher=local: a multirun's trials in parallel on one machine, each on its own devices.

The slot plan is checked directly; the sweeps run train.py as a user does, with a callback that
writes what each trial ran with (tests.helpers.trial_env): on a CPU machine with a declared GPU
list every trial sees its own CUDA_VISIBLE_DEVICES and trains on CPU, two trials train at the
same time, and a trial that raises or is killed leaves the others done and the summary saying
which failed. An Optuna search on it runs its `n_jobs` trials at once, and a stopped sweep
launched again trains only what had not finished.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from optuna.trial import TrialState

from hydra_plugins.trainwell_local_launcher._slots import Slot, cap_workers, plan_slots
from tests.helpers.config import CONF, QUIET_RUN, REPO
from tests.helpers.scripts import TESTS_IMPORTABLE
from tests.helpers.search import BRUTE_FORCE, TINY
from tests.helpers.trial_env import HELD

ENV = TESTS_IMPORTABLE

# Tiny trials: a few batches of digits, no rich output, the trial's environment recorded.
SMALL = [
    "trainer.max_epochs=1",
    "+trainer.limit_train_batches=3",
    "+trainer.limit_val_batches=2",
    "+trainer.limit_test_batches=2",
    "logger=[]",
    *QUIET_RUN,
    "+callbacks.env._target_=tests.helpers.trial_env.TrialEnv",
]


def test_slots_share_the_gpus_in_groups_and_the_cpus_equally() -> None:
    gpus = ["0", "1", "2", "3"]
    assert plan_slots(gpus, 1, None, 16) == [Slot((g,), 4) for g in gpus]
    assert plan_slots(gpus, 2, None, 16) == [Slot(("0", "1"), 8), Slot(("2", "3"), 8)]
    # Two trials per GPU on a one-GPU machine; a CPU machine: one at a time unless asked.
    assert plan_slots(["0"], 1, 2, 8) == [Slot(("0",), 4), Slot(("0",), 4)]
    assert plan_slots([], 1, None, 8) == [Slot((), 8)]
    assert plan_slots([], 1, 3, 2) == [Slot((), 1)] * 3
    assert Slot(("2", "3"), 8).env()["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert Slot((), 8).env()["CUDA_VISIBLE_DEVICES"] == ""  # CPU trials see no GPU


def test_a_trials_loader_workers_are_capped_at_its_cpu_share() -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"data": {"num_workers": 8}})
    assert cap_workers(cfg, 3) == "local launcher: data.num_workers=8 -> 3 (this trial's CPU share)"
    assert cfg.data.num_workers == 3
    assert cap_workers(cfg, 4) is None and cfg.data.num_workers == 3  # within the share: kept
    assert cap_workers(OmegaConf.create({"data": {}}), 2) is None  # a datamodule without it


@pytest.mark.parametrize(
    ("gpus", "per_trial", "slots", "says"),
    [
        (["0"], 2, None, "gpus_per_trial=2 but only 1 GPUs"),
        (["0", "0"], 1, None, "names a GPU twice"),
        ([], 1, 0, "slots=0"),
        ([], 0, None, "gpus_per_trial=0"),
    ],
)
def test_impossible_settings_are_refused(
    gpus: list[str], per_trial: int, slots: int | None, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        plan_slots(gpus, per_trial, slots, 4)


def test_launcher_local_composes_with_resume_auto_and_the_machine_as_default() -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=["launcher=local", "hydra.launcher.slots=2"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("trainwell_local_launcher.launcher.TrainwellLocalLauncher")
    assert cfg.resume == "auto"  # a sweep launched again continues its unfinished trials
    assert (launcher.gpus_per_trial, launcher.gpus, launcher.slots) == (1, None, 2)


def _sweep(sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/train.py", "-m", *overrides, f"hydra.sweep.dir={sweep_dir}"],
        cwd=REPO,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _trial(sweep_dir: Path, num: int) -> dict:
    return json.loads((sweep_dir / str(num) / "trial_env.json").read_text())


@pytest.mark.slow
def test_declared_gpus_isolate_trials_and_a_failed_or_killed_trial_stops_no_other(
    tmp_path: Path,
) -> None:
    sweep_dir = tmp_path / "sweep"
    proc = _sweep(
        sweep_dir,
        "launcher=local",
        "hydra.launcher.gpus=[0,1]",
        *SMALL,
        "+callbacks.env.mode=ok,ok,fail,kill",
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "planted failure of this trial" in proc.stderr
    first, second = _trial(sweep_dir, 0), _trial(sweep_dir, 1)
    # Each trial on its own GPU, half the CPUs each; on this CPU machine they trained on CPU.
    assert {first["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]} == {"0", "1"}
    assert first["pid"] != second["pid"]
    for record in (first, second):
        assert record["OMP_NUM_THREADS"] == str(record["torch_threads"])
    assert (sweep_dir / "0" / "results.json").is_file()
    assert (sweep_dir / "1" / "results.json").is_file()
    failed = (sweep_dir / "2" / "failure.txt").read_text()
    killed = (sweep_dir / "3" / "failure.txt").read_text()
    assert "planted failure of this trial" in failed
    assert "was killed or died before handing back a result" in killed
    summary = (sweep_dir / "summary.md").read_text()
    assert "2 jobs with results, 2 without" in summary, summary
    assert "job 3 " in summary and "was killed or died" in summary, summary


@pytest.mark.slow
def test_the_cpu_command_of_the_docs_runs_two_trials_at_once(tmp_path: Path) -> None:
    """docs/cluster.md's CPU command as written, made small."""
    sweep_dir = tmp_path / "sweep"
    command = "python scripts/train.py -m launcher=local hydra.launcher.slots=2 seed=1,2,3,4"
    assert command in (REPO / "docs" / "cluster.md").read_text()
    proc = _sweep(sweep_dir, *command.split()[3:], *SMALL, "+callbacks.env.meet=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 trials, 2 at once" in proc.stdout, proc.stdout[-3000:]
    records = [_trial(sweep_dir, num) for num in range(4)]
    assert all(r["CUDA_VISIBLE_DEVICES"] == "" for r in records)
    # Each trial waited at its start until two had started: one at a time, it waits in vain.
    assert all(r["met"] for r in records), records
    assert "4 jobs with results" in (sweep_dir / "summary.md").read_text()


@pytest.mark.slow
def test_an_optuna_search_runs_n_jobs_trials_at_once_and_records_the_failed_one(
    tmp_path: Path,
) -> None:
    """docs/cluster.md's CPU search command as written, made small: a 2-point space searched
    brute force, one point (dropout 1.5) refused by torch when the trial builds its net."""
    sweep_dir = tmp_path / "sweep"
    command = (
        "python scripts/train.py -m hparams_search=digits_optuna launcher=local "
        "hydra.launcher.slots=2 hydra.sweeper.n_jobs=2"
    )
    assert command in (REPO / "docs" / "cluster.md").read_text()
    proc = _sweep(
        sweep_dir,
        *command.split()[3:],
        *TINY,
        *BRUTE_FORCE,
        "hydra.sweeper.n_trials=2",
        "model.net.dropout=choice(0.1,1.5)",
        "+callbacks.env._target_=tests.helpers.trial_env.TrialEnv",
        # Each trial waits as its job starts until both have started, the failing one included.
        "+hydra.callbacks.meet._target_=tests.helpers.job_meet.MeetAtJobStart",
        "+hydra.callbacks.meet.count=2",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 trials, 2 at once" in proc.stdout, proc.stdout[-3000:]
    for num in (0, 1):  # one at a time, the first waits in vain
        meet = json.loads((sweep_dir / str(num) / "meet.json").read_text())
        assert meet["met"], (num, meet)
    study = optuna.load_study(
        study_name="digits_optuna", storage=f"sqlite:///{sweep_dir}/optuna.db"
    )
    trials = {t.params["model.net.dropout"]: t for t in study.trials}
    assert sorted(trials) == [0.1, 1.5]
    failed, best = trials[1.5], trials[0.1]
    assert failed.state == TrialState.FAIL and best.state == TrialState.COMPLETE
    assert "dropout probability has to be between 0 and 1" in failed.user_attrs["failure"]
    results = json.loads((sweep_dir / str(best.number) / "results.json").read_text())
    assert best.value == results["metrics"]["val/loss"]
    # The completed trial ran on its slot's share of the CPUs.
    record = _trial(sweep_dir, best.number)
    share = max(len(os.sched_getaffinity(0)) // 2, 1)
    assert record["OMP_NUM_THREADS"] == str(record["torch_threads"]) == str(share)
    assert f"trial {failed.number} failed: " in proc.stdout
    assert "2 trials (1 complete, 1 failed)" in proc.stdout
    assert f"best trial {best.number}: val/loss={best.value} with model.net.dropout=0.1" in (
        proc.stdout
    )
    summary = (sweep_dir / "summary.md").read_text()
    assert "1 job with results, 1 without" in summary, summary
    assert f"- job {failed.number} (" in summary and "dropout probability" in summary, summary


def _wait_for(sweep: subprocess.Popen, paths: list[Path], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(path.is_file() for path in paths):
        assert sweep.poll() is None, sweep.communicate()[1][-3000:]
        assert time.monotonic() < deadline, [p for p in paths if not p.is_file()]
        time.sleep(0.1)


def _untouched(run_dir: Path) -> dict[str, tuple[int, bytes]]:
    """A finished trial's files with their mtimes and bytes (Hydra's .hydra/ and the log are
    written on every start, trained or not)."""
    files = [run_dir / "results.json", run_dir / "trial_env.json", *run_dir.glob("checkpoints/*")]
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}


@pytest.mark.slow
def test_sigterm_to_a_sweep_preempts_its_running_trials_leaves_no_process_and_starts_no_other(
    tmp_path: Path,
) -> None:
    """... and the sweep launched again trains only what had not finished (one sweep, both)."""
    sweep_dir = tmp_path / "sweep"
    # Two at a time: trial 0 is killed as it starts training (its first attempt only) and trial 2
    # takes its slot and finishes; trials 1 and 3 hold after their first step until the sweep is
    # stopped, which pre-empts them; trial 4 waits for a slot. The same command launched again
    # finishes the sweep. meet=1: each trial marks its start with its pid and waits for no other.
    command = [
        "launcher=local",
        "hydra.launcher.slots=2",
        *SMALL,
        "+callbacks.env.once=true",
        "+callbacks.env.wait_s=500",
        "+callbacks.env.meet=1",
        "+callbacks.env.mode=kill,hold,ok,hold,ok",
    ]
    sweep = subprocess.Popen(
        [sys.executable, "scripts/train.py", "-m", *command, f"hydra.sweep.dir={sweep_dir}"],
        cwd=REPO, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        cues = [sweep_dir / "2" / "results.json", sweep_dir / "1" / HELD, sweep_dir / "3" / HELD]
        _wait_for(sweep, cues, timeout_s=500)
        sweep.terminate()
        _, err = sweep.communicate(timeout=300)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 1, err[-3000:]
    assert "local launcher: stopped 2 running trials" in err, err[-3000:]
    assert "was killed" in (sweep_dir / "0" / "failure.txt").read_text()
    for num in (1, 3):  # each running trial pre-empted: a checkpoint to continue from
        assert (sweep_dir / str(num) / "checkpoints" / "preempt.ckpt").is_file()
    assert not (sweep_dir / "4").exists()  # the waiting one never started
    trial_pids = [int(p.name.removeprefix(".started_")) for p in sweep_dir.glob(".started_*")]
    assert len(trial_pids) == 3, trial_pids  # 1, 2 and 3 (0 was killed before it marked)
    for pid in trial_pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finished = _untouched(sweep_dir / "2")
    assert {"results.json", "trial_env.json", "best.ckpt"} <= set(finished), finished

    again = _sweep(sweep_dir, *command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "5 trials, 2 at once" in again.stdout, again.stdout[-3000:]
    # Trial 2 started, found its results and checkpoint, returned them: nothing trained, nothing
    # written.
    assert _untouched(sweep_dir / "2") == finished
    (output,) = [
        line.rsplit("output: ", 1)[1] for line in again.stdout.splitlines()
        if line.startswith("trial 2 (")
    ]  # fmt: skip
    assert "this run is complete" in Path(output).read_text()
    # The pre-empted trials continued from their checkpoints; the killed one (no checkpoint) and
    # the one never started trained from the start; every trial ends where a whole run ends.
    for num, resumed in ((0, False), (1, True), (3, True), (4, False)):
        assert (_trial(sweep_dir, num)["start_step"] > 0) is resumed, num
    # The same seed and data in every trial: the resumed ones end as the uninterrupted one did.
    results = [json.loads((sweep_dir / str(n) / "results.json").read_text()) for n in range(5)]
    assert [r["finished_at"]["global_step"] for r in results] == [3] * 5
    assert len({(r["metrics"]["val/loss"], r["metrics"]["test/loss"]) for r in results}) == 1
    assert not (sweep_dir / "0" / "failure.txt").exists()
    summary = (sweep_dir / "summary.md").read_text()
    assert "5 jobs with results;" in summary and "Without results" not in summary, summary
