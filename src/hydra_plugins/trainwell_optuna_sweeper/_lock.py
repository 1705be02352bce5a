"""One sweep process per sweep dir."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from ._failures import SweepFailed


def hold_sweep_lock(sweep_dir: Path) -> IO[str]:
    """An exclusive lock on <sweep dir>/.sweep.lock for as long as this sweep runs (the kernel drops
    it when the process dies, SIGKILL included). A second sweep on the same dir would take the
    first one's running trials for interrupted ones and fail them under it."""
    handle = (sweep_dir / ".sweep.lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "?"
        handle.close()
        raise SweepFailed(
            f"another sweep (pid {owner}) is running in {sweep_dir}; wait for it or stop it, "
            "then run this command again to continue the study"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle
