"""One writer per run dir: a run holds an exclusive OS lock on `<run dir>/.lock` while it lives.

Two launches into one dir (a double-submitted job, a script run twice) would interleave their
checkpoints and logs and destroy both runs; the second launch exits 2 instead, naming the holder.
The lock is a POSIX record lock (`fcntl.lockf`): the kernel (or the NFS lock manager) drops it when
the holding process dies, however it dies, so a killed run never blocks its own `resume=auto`. A
record lock belongs to the process, not to the open file, so DataLoader workers forked from the
run do not keep it alive after the run is gone. What it covers on shared filesystems is in
docs/cluster.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from trainwell.errors import TrainwellError
from trainwell.io.run_dir import new_run_override
from trainwell.io.writer import writes_shared_files

LOCK_NAME = ".lock"
# run dir -> the open lock file. Never closed while the run lives: closing *any* descriptor of the
# file would release a POSIX lock, so nothing else in the holding process opens it.
_held: dict[str, int] = {}
# Filesystems without working locks (NFS mounted `nolock`, Lustre without `flock`) answer with
# one of these instead of granting or refusing the lock.
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class RunDirInUse(TrainwellError):
    """Another live process holds the run dir."""


def _key(run_dir: Path) -> str:
    # Hydra creates the dir from os.path.abspath(hydra.run.dir): the same spelling here.
    return os.path.abspath(run_dir)


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "a process that has not written its host and pid yet"


def lock_run_dir(run_dir: Path) -> bool:
    """Take the run dir's lock for the rest of this process (or until `release_run_dir`).

    True if this call took it, False if this process already held it or the filesystem has no
    locks (one warning line says so). Raises RunDirInUse naming the holder; then nothing in the
    dir was created or changed.
    """
    key = _key(run_dir)
    if key in _held:
        return False
    path = Path(key) / LOCK_NAME
    Path(key).mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EACCES, errno.EAGAIN):
            raise RunDirInUse(
                f"run dir {key} is in use by {_holder(path)}; wait for that run to end (then "
                f"resume=auto continues it), or start a new run with {new_run_override()}"
            ) from None
        if err.errno in _UNSUPPORTED:
            print(
                f"warning: cannot lock run dir {key} ({os.strerror(err.errno)}: the filesystem "
                "has no file locks); a second launch into it would not be stopped",
                file=sys.stderr,
            )
            return False
        raise
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()} since {since}\n".encode(), 0)
    _held[key] = fd
    return True


def release_run_dir(run_dir: Path) -> None:
    fd = _held.pop(_key(run_dir), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """The lock for one job: a no-op for ranks > 0 (they run under rank 0's lock and must not fail
    on it) and when the launch already took it (before Hydra wrote into the dir); released at the
    end only if taken here (a multirun job)."""
    took = writes_shared_files() and lock_run_dir(run_dir)
    try:
        yield
    finally:
        if took:
            release_run_dir(run_dir)
