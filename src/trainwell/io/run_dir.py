"""What a run may find in its run dir before it starts, and what it refuses to mix with."""

from __future__ import annotations

import os
from pathlib import Path

from trainwell.errors import TrainwellError


def _launching_process() -> bool:
    # DDP re-executes the script per rank (LOCAL_RANK set): only the first process tidies up.
    return os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0"


def prepare_run_dir(run_dir: Path, resuming: bool) -> None:
    """Remove temp files of interrupted checkpoint / results writes; refuse a fresh start over
    another run's checkpoints (its CSV would be appended to, `best` versioned, and resume=auto
    would later choose among both runs' checkpoints)."""
    checkpoints = run_dir / "checkpoints"
    if not resuming and checkpoints.is_dir() and any(checkpoints.glob("*.ckpt")):
        raise TrainwellError(
            f"{run_dir} already holds checkpoints of a run; continue it with resume=auto, or start "
            "a new run with run_id=<new name> (or hydra.run.dir=<empty dir>)"
        )
    if not _launching_process():
        return
    leftovers = [*checkpoints.glob(".*.tmp")] if checkpoints.is_dir() else []
    leftovers += [*run_dir.glob(".results-*.json")] if run_dir.is_dir() else []
    for path in leftovers:
        path.unlink(missing_ok=True)
