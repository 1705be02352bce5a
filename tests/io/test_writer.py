"""One process writes the files a run's processes share, whatever launched them.

The slow tests run a cross-validation multirun as two ranks, launched by two torchrun agents
(two nodes simulated on this machine, a local c10d rendezvous) and as two srun tasks (their
environment as srun sets it), with every shared write logged: the run dir lock, the folds, each
fold's predictions, the CV results and summary, and the sweep summary are written by rank 0
alone. A predicate that reads LOCAL_RANK and NODE_RANK only lets the second node's (or the second
task's) process write the CV files too.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.helpers.config import QUIET_RUN, REPO
from tests.helpers.torchrun import ENV, TORCHRUN_ENV
from trainwell.io.writer import RANK_VARIABLES, writes_shared_files

# Each launcher's variables in each of its processes; True for the one that writes.
LAUNCHES = {
    "plain run or a multirun's job": [({}, True)],
    "Lightning DDP, 2 nodes x 2": [
        ({"LOCAL_RANK": "0", "NODE_RANK": "0"}, True),
        ({"LOCAL_RANK": "1", "NODE_RANK": "0"}, False),
        ({"LOCAL_RANK": "0", "NODE_RANK": "1"}, False),
        ({"LOCAL_RANK": "1", "NODE_RANK": "1"}, False),
    ],
    "torchrun, 2 nodes x 2": [
        ({"RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"}, True),
        ({"RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0"}, False),
        ({"RANK": "2", "LOCAL_RANK": "0", "GROUP_RANK": "1"}, False),
        ({"RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1"}, False),
    ],
    "srun, 2 nodes x 2": [
        ({"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}, True),
        ({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0"}, False),
        ({"SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1"}, False),
        ({"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1"}, False),
    ],
    "srun task 0, Lightning's rank 1 in it": [
        ({"SLURM_PROCID": "0", "LOCAL_RANK": "1", "NODE_RANK": "0"}, False)
    ],
    "jsrun": [({"JSM_NAMESPACE_RANK": "0"}, True), ({"JSM_NAMESPACE_RANK": "1"}, False)],
}


@pytest.mark.parametrize("launch", sorted(LAUNCHES))
def test_exactly_the_launchs_rank_zero_writes(launch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*RANK_VARIABLES, "SLURM_LOCALID", "SLURM_NODEID"):
        monkeypatch.delenv(name, raising=False)
    for variables, writes in LAUNCHES[launch]:
        with monkeypatch.context() as env:
            for name, value in variables.items():
                env.setenv(name, value)
            assert writes_shared_files() is writes, variables


# A one-job multirun of 2-fold cross-validation, one epoch per fold, on 2 ranks (gloo).
CV_SWEEP = [
    "-m",
    "cv.folds=2",
    "data.batch_size=128",
    "trainer.max_epochs=1",
    "trainer=ddp_sim",
    "logger=[]",
    "callbacks.step_checkpoint=null",
    *QUIET_RUN,
]
WRITES = {  # each shared write and how often the run makes it
    "run_dir.lock": 1,
    "cv.write_folds": 1,
    "cv.write_fold_predictions": 2,
    "cv.write_results": 1,
    "cv.write_summary": 1,
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _assert_one_writer(log: Path, sweep_dir: Path, rank_zero: str) -> None:
    by_what: dict[str, list[str]] = defaultdict(list)
    for line in log.read_text().splitlines():
        what, pid, ranks = line.split(" ", 2)
        by_what[what].append(f"{pid} {ranks}")
    writers = {entry for entries in by_what.values() for entry in entries}
    assert len(writers) == 1 and rank_zero in writers.pop(), dict(by_what)
    assert {what: len(by_what[what]) for what in WRITES} == WRITES, dict(by_what)
    assert by_what["sweep.update_summary"], dict(by_what)  # the job's end and the sweep's end
    results = json.loads((sweep_dir / "0" / "results.json").read_text())
    assert results["cv"]["folds"] == 2
    assert json.loads((sweep_dir / "summary.json").read_text())


@pytest.mark.slow
def test_two_torchrun_nodes_write_shared_files_from_global_rank_zero_only(
    tmp_path: Path,
) -> None:
    sweep_dir, log, port = tmp_path / "sweep", tmp_path / "writes.log", _free_port()
    env = {**TORCHRUN_ENV, "WRITES_LOG": str(log)}
    torchrun = Path(sys.executable).with_name("torchrun")
    agents = [
        subprocess.Popen(
            [
                str(torchrun),
                "--nnodes=2",
                f"--node-rank={node}",
                "--nproc-per-node=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                "--rdzv-id=writers",
                "tests/helpers/logged_writes.py",
                "scripts/train.py",
                *CV_SWEEP,
                "trainer.devices=1",
                "+trainer.num_nodes=2",
                f"hydra.sweep.dir={sweep_dir}",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    try:
        outs = [agent.communicate(timeout=300)[0] for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()  # ends its workers: torchrun starts them in its own process group
                agent.wait()
    for agent, out in zip(agents, outs, strict=True):
        assert agent.returncode == 0, out[-4000:]
    _assert_one_writer(log, sweep_dir, "RANK=0,")


@pytest.mark.slow
def test_two_srun_tasks_write_shared_files_from_task_zero_only(tmp_path: Path) -> None:
    sweep_dir, log = tmp_path / "sweep", tmp_path / "writes.log"
    slurm = {  # as srun -N1 -n2 sets them (no LOCAL_RANK, no RANK)
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "train",
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "WRITES_LOG": str(log),
    }
    base = {k: v for k, v in ENV.items() if k not in RANK_VARIABLES}
    tasks = [
        subprocess.Popen(
            [
                sys.executable,
                "tests/helpers/logged_writes.py",
                "scripts/train.py",
                *CV_SWEEP,
                f"hydra.sweep.dir={sweep_dir}",
            ],
            cwd=REPO,
            env={**base, **slurm, "SLURM_PROCID": str(task), "SLURM_LOCALID": str(task)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for task in (0, 1)
    ]
    try:
        outs = [task.communicate(timeout=300)[0] for task in tasks]
    finally:
        for task in tasks:
            if task.poll() is None:
                os.killpg(task.pid, 9)
                task.wait()
    for task, out in zip(tasks, outs, strict=True):
        assert task.returncode == 0, out[-4000:]
    _assert_one_writer(log, sweep_dir, "SLURM_PROCID=0")
