"""A refused run leaves nothing new behind.

Hydra writes `.hydra/`, the job's log (and the run takes `.lock`) before the job can refuse its
input: a refusal answered inside the job (exit 2, one line) would leave an empty-looking run dir,
or, in a run dir that existed (`resume=auto`, `run_id=<name>`), a `.hydra/config.yaml` that now
describes the refused command instead of the run whose checkpoints sit beside it.

What the launch found is recorded before Hydra starts; after a refusal, when the job wrote nothing
but that bookkeeping, it is undone: a new run dir is removed (with the parents made for it), an
existing one gets its `.hydra/` files, lock and logs back as they were. A refusal after the run
produced anything else (a checkpoint, a doctor report) keeps everything: that output is the run's.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

HYDRA_DIR = ".hydra"
LOCK = ".lock"


def _bookkeeping(relative: Path) -> bool:
    """What a launch writes before its job runs: Hydra's config copies, the lock, the job log."""
    return relative.parts[0] == HYDRA_DIR or (
        len(relative.parts) == 1 and (relative.name == LOCK or relative.suffix == ".log")
    )


def _files(run_dir: Path) -> dict[Path, tuple[int, int]]:
    found = {}
    for root, _dirs, names in os.walk(run_dir):
        for name in names:
            path = Path(root) / name
            try:
                stat = path.stat()
            except OSError:  # removed while walking (a log rotated away)
                continue
            found[path.relative_to(run_dir)] = (stat.st_size, stat.st_mtime_ns)
    return found


@dataclass
class RunDirBefore:
    """The run dir as the launch found it."""

    run_dir: Path
    existed: bool
    first_existing_parent: Path
    files: dict[Path, tuple[int, int]] = field(default_factory=dict)
    saved: dict[Path, bytes] = field(default_factory=dict)  # .hydra/ files and the lock

    @classmethod
    def record(cls, run_dir: Path) -> RunDirBefore:
        run_dir = Path(os.path.abspath(run_dir))
        parent = run_dir
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not run_dir.is_dir():
            return cls(run_dir, existed=False, first_existing_parent=parent)
        files = _files(run_dir)
        saved = {}
        for relative in files:
            if _bookkeeping(relative) and relative.suffix != ".log":
                saved[relative] = (run_dir / relative).read_bytes()
        return cls(run_dir, True, parent, files, saved)

    def undo_bookkeeping(self) -> None:
        """After a refusal: undo what the launch wrote, if that is all it wrote."""
        if not self.run_dir.is_dir():
            return
        now = _files(self.run_dir)
        changed = [p for p, seen in now.items() if self.files.get(p) != seen]
        if not all(_bookkeeping(p) for p in changed):
            return  # the run produced output before it was refused: keep it all
        if not self.existed:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            parent = self.run_dir.parent
            while parent != self.first_existing_parent and parent.is_dir():
                if any(parent.iterdir()):
                    break
                parent.rmdir()
                parent = parent.parent
            return
        for relative in changed:
            path = self.run_dir / relative
            if relative in self.saved:
                path.write_bytes(self.saved[relative])
            elif relative in self.files:  # a log the job appended to
                os.truncate(path, self.files[relative][0])
            else:
                path.unlink(missing_ok=True)
        hydra_dir = self.run_dir / HYDRA_DIR
        if hydra_dir.is_dir() and not any(hydra_dir.iterdir()):
            hydra_dir.rmdir()
