"""What a run may find in its run dir before it starts, and what it refuses to mix with."""

from __future__ import annotations

import sys
from pathlib import Path

from trainwell.errors import TrainwellError
from trainwell.io.writer import writes_shared_files


def new_run_override() -> str:
    """The override that starts a new run beside the one in this run dir, as this command line
    names its run dir: a dir given by hydra.run.dir (a sweep's by hydra.sweep.dir) stays where it
    is whatever run_id= says, so there the dir itself must change; else run_id=<new name>."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    key, given = "hydra.run.dir", sys.argv[1:]  # before Hydra starts the job: its command line
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        given = [*hydra_cfg.overrides.hydra, *hydra_cfg.overrides.task]
        if hydra_cfg.mode == RunMode.MULTIRUN:
            key = "hydra.sweep.dir"
    if any(arg.split("=", 1)[0].lstrip("+") == key for arg in given):
        return f"{key}=<empty dir>"
    return "run_id=<new name>"


def prepare_run_dir(run_dir: Path, resuming: bool) -> None:
    """Remove temp files of interrupted checkpoint / results writes; refuse a fresh start over
    another run's checkpoints (its CSV would be appended to, `best` versioned, and resume=auto
    would later choose among both runs' checkpoints)."""
    checkpoints = run_dir / "checkpoints"
    if not resuming and checkpoints.is_dir() and any(checkpoints.glob("*.ckpt")):
        raise TrainwellError(
            f"{run_dir} already holds checkpoints of a run; continue it with resume=auto, or start "
            f"a new run with {new_run_override()}"
        )
    if not writes_shared_files():  # every rank runs this; one tidies up
        return
    leftovers = [*checkpoints.glob(".*.tmp")] if checkpoints.is_dir() else []
    leftovers += [*run_dir.glob(".results-*.json")] if run_dir.is_dir() else []
    for path in leftovers:
        path.unlink(missing_ok=True)
