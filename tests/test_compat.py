"""Each workaround in trainwell.compat is pinned to the upstream behaviour it works around: these
tests fail once upstream changes it (then delete the workaround and its test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.training.test_torchrun import run_torchrun
from trainwell import compat
from trainwell.errors import TrainwellError

WORKER = """
import datetime, os, sys
import torch.distributed as dist
env = {k: os.environ.get(k) for k in ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE")}
print("worker env", env, flush=True)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
dist.barrier()
if env["TORCHELASTIC_RESTART_COUNT"] == "0":
    sys.exit(3)  # what a pre-empted trainwell run exits with
print("restarted group connected", flush=True)
"""


def _torchrun_with_one_restart(tmp_path: Path, **env: str) -> tuple[int | None, str]:
    """torchrun with a worker that exits 3 once; a restarted group on stale addresses either
    fails to connect or waits forever (None after 90 s)."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    args = ["--standalone", "--nproc-per-node=2", "--max-restarts=1", str(script)]
    return run_torchrun(args, {**os.environ, **env}, timeout=90)


@pytest.mark.slow
def test_torchrun_restart_on_the_shared_store_reads_the_previous_rounds_addresses(
    tmp_path: Path,
) -> None:
    code, out = _torchrun_with_one_restart(tmp_path)
    assert code != 0 and "restarted group connected" not in out, out[-3000:]
    # The restarted workers see exactly what the refusal checks for.
    restarted = "{'TORCHELASTIC_RESTART_COUNT': '1', 'TORCHELASTIC_USE_AGENT_STORE': 'True'}"
    assert f"worker env {restarted}" in out
    code, out = _torchrun_with_one_restart(tmp_path, **{compat.TORCHRUN_FRESH_STORE: "1"})
    assert code == 0, out[-3000:]
    assert out.count("restarted group connected") == 2


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
