"""torchrun --nproc-per-node=2 on CPU (gloo): Lightning takes rank and world from torchrun and starts
no processes of its own; SIGTERM mid-run pre-empts the worker group (checkpoint at the window end,
exit 3), torchrun restarts it (--max-restarts=1), resume=auto continues from preempt.ckpt, and the
run ends with the weights of an uninterrupted run that Lightning launched itself. Without a fresh
rendezvous store per round the restart fails (compat.refuse_torchrun_restart_on_shared_store).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.training.test_kill_resume import RUN, assert_bitwise_equal, final_state

pytestmark = pytest.mark.slow

# 2 ranks x micro-batch 64 x accumulate 3: 10 micro-batches per rank (windows 3,3,3,1), 1 epoch.
# Rank 0 gets SIGTERM after its 6th micro-batch, a window end; the ranks agree on stopping every
# log_every_n_steps optimizer steps (here every step): preempt.ckpt at optimizer step 2.
# The restarted group resumes there with 4 micro-batches to go, so the signal is not sent again.
OVERRIDES = [
    *[o for o in RUN if not o.startswith("trainer.max_epochs")],
    "trainer.max_epochs=1",
    "trainer.log_every_n_steps=1",
    "trainer=ddp_sim",
]
SIGTERM_AT = [
    "+callbacks.killer._target_=tests.training.killer.KillAt",
    "+callbacks.killer.batch=5",
    "+callbacks.killer.signal=SIGTERM",
]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true"}
TORCHRUN_ENV = {**ENV, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # compat.TORCHRUN_FRESH_STORE


def run_torchrun(args: list[str], env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """(exit code, stdout + stderr) of `torchrun <args>`; None when it outlived `timeout`: then
    torchrun gets SIGTERM, which its agent passes on to the workers (each in its own session)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.Popen(
        [str(torchrun), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        return None, out


def test_torchrun_restart_resumes_to_the_uninterrupted_weights(tmp_path: Path) -> None:
    reference_dir, run_dir = tmp_path / "lightning-launched", tmp_path / "torchrun"
    reference = subprocess.Popen(
        [sys.executable, "scripts/train.py", *OVERRIDES, f"hydra.run.dir={reference_dir}"],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    code, out = run_torchrun(
        [
            "--standalone",
            "--nproc-per-node=2",
            "--max-restarts=1",
            "scripts/train.py",
            *OVERRIDES,
            "resume=auto",
            *SIGTERM_AT,
            f"hydra.run.dir={run_dir}",
        ],
        TORCHRUN_ENV,
        timeout=600,
    )
    assert code == 0, out[-4000:]
    ckpts = run_dir / "checkpoints"
    tail = out[-4000:]
    assert f"at step 2: checkpoint {ckpts}/preempt.ckpt; continue with resume=auto" in out, tail
    assert f"resume=auto: resuming from {ckpts}/preempt.ckpt" in out, tail
    # torchrun's workers were the ranks: Lightning's own launcher would have started
    # `train_ddp_process_1` with its own log file.
    assert not list(run_dir.glob("train_ddp_process_*.log"))
    assert reference.wait(timeout=600) == 0, reference.stderr.read()[-3000:]
    assert (reference_dir / "train_ddp_process_1.log").is_file()
    assert_bitwise_equal(final_state(run_dir), final_state(reference_dir))
