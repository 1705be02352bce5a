"""Each workaround in trainwell.compat is pinned to the upstream behaviour it works around: these
tests fail once upstream changes it (then delete the workaround and its test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.training.test_torchrun import run_torchrun
from trainwell import compat
from trainwell.errors import TrainwellError

# A worker that leaves a key in the store its process group would use (env:// rendezvous: the
# agent's store when TORCHELASTIC_USE_AGENT_STORE=True, else one rank 0 hosts at MASTER_PORT) and
# exits 3; torchrun restarts it, and the restarted worker reports whether that key is still there.
# Gloo and NCCL publish each rank's address under fixed keys in that store: a key that survives
# the round is a dead rank's address a restarted rank may connect to.
WORKER = """
import datetime, os
import torch.distributed as dist
env = {k: os.environ[k] for k in ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE")}
print("worker env", env, flush=True)
host = os.environ["RANK"] == "0" and env["TORCHELASTIC_USE_AGENT_STORE"] != "True"
store = dist.TCPStore(
    os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size=2, is_master=host,
    timeout=datetime.timedelta(seconds=60),
)
if env["TORCHELASTIC_RESTART_COUNT"] == "0":
    if os.environ["RANK"] == "0":
        store.set("rank_0_address", "from the first round")
    store.wait(["rank_0_address"])
    store.add("done", 1)
    while store.add("done", 0) < 2:  # the host rank keeps serving until both have read
        pass
    raise SystemExit(3)  # what a pre-empted trainwell run exits with
print("previous round's key visible:", store.check(["rank_0_address"]), flush=True)
"""


def _torchrun_with_one_restart(tmp_path: Path, **env: str) -> tuple[int | None, str]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    args = ["--standalone", "--nproc-per-node=2", "--max-restarts=1", str(script)]
    return run_torchrun(args, {**os.environ, **env}, timeout=300)


@pytest.mark.slow
def test_torchrun_restart_on_the_shared_store_sees_the_previous_rounds_keys(
    tmp_path: Path,
) -> None:
    code, out = _torchrun_with_one_restart(tmp_path)
    assert code == 0, out[-3000:]
    # The restarted workers see exactly what the refusal checks for ...
    restarted = "{'TORCHELASTIC_RESTART_COUNT': '1', 'TORCHELASTIC_USE_AGENT_STORE': 'True'}"
    assert out.count(f"worker env {restarted}") == 2
    # ... and the first round's keys.
    assert out.count("previous round's key visible: True") == 2, out[-3000:]
    code, out = _torchrun_with_one_restart(tmp_path, **{compat.TORCHRUN_FRESH_STORE: "1"})
    assert code == 0, out[-3000:]
    assert out.count("previous round's key visible: False") == 2, out[-3000:]


def test_a_restarted_torchrun_worker_on_the_shared_store_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    compat.refuse_torchrun_restart_on_shared_store()  # the first round is fine
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    with pytest.raises(TrainwellError, match="TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
        compat.refuse_torchrun_restart_on_shared_store()
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")  # torchrun given the fix
    compat.refuse_torchrun_restart_on_shared_store()


def test_wandb_logger_reuses_a_run_in_progress_until_it_is_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_SILENT", "true")

    def experiment_id(name: str) -> str:
        logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="compat", id=name)
        return logger.experiment.id

    try:
        assert experiment_id("first") == "first"
        assert experiment_id("second") == "first"  # Lightning's reuse: the behaviour worked around
        compat.finish_wandb_run()
        assert wandb.run is None
        assert experiment_id("third") == "third"
    finally:
        compat.finish_wandb_run()
