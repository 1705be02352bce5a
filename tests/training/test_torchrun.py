"""torchrun --nproc-per-node=2 on CPU (gloo): Lightning takes rank and world from torchrun and starts
no processes of its own; SIGTERM mid-run pre-empts the worker group (checkpoint at the window end,
exit 3), torchrun restarts it (--max-restarts=1), resume=auto continues from preempt.ckpt, and the
run ends with the weights of an uninterrupted run that Lightning launched itself. Without a fresh
rendezvous store per round the restart fails (compat.refuse_torchrun_restart_on_shared_store).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.config import REPO
from tests.helpers.kill_runs import RUN
from tests.helpers.state import assert_bitwise_equal, final_state
from tests.helpers.torchrun import ENV, TORCHRUN_ENV, run_torchrun

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
    "+callbacks.killer._target_=tests.helpers.killer.KillAt",
    "+callbacks.killer.batch=5",
    "+callbacks.killer.signal=SIGTERM",
]


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
