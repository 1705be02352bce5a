"""results.json: the run's machine-readable outcome, written atomically (and other files so)."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# A search trial's reported values and the step it was pruned at, if it was (callbacks/pruning.py);
# the sweep summary counts pruned trials from it.
PRUNING_FILE = "pruning.json"


def _new_file_mode() -> int:
    """The mode open() gives a new file in this process: 0o666 less the umask. tempfile.mkstemp
    (and safetensors) create files 0600, which the run dir's other readers (a teammate, a server
    started by another user) cannot read while every other file of the run dir can."""
    try:  # Linux says it without changing it (changing it, even briefly, races other threads)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


NEW_FILE_MODE = _new_file_mode()


def as_new_file(path: Path) -> None:
    """Give `path`, written by a library that creates files 0600, the mode any other file of the
    run dir has (the umask's)."""
    os.chmod(path, NEW_FILE_MODE)


def started_now() -> str:
    """When a run (or a cross-validation) started, UTC, as results.json's `started_at` holds it:
    what picks "the newest run", whatever the runs are named."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def with_doctor_report(results: dict[str, Any], doctor_report: str | None) -> dict[str, Any]:
    """`results` naming the doctor's preflight report (doctor=true), when one was written."""
    return {**results, "doctor_report": doctor_report} if doctor_report else results


def write_results(path: Path, results: dict[str, Any]) -> None:
    """Write via a temp file + rename: a reader (a sweep script, a scheduler) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".results-", suffix=".json")
    try:
        os.fchmod(fd, NEW_FILE_MODE)
        with os.fdopen(fd, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Any other run-dir file a reader must never see half-written (oof_predictions.csv): a temp
    file beside it, then a rename; a kill leaves the old file or none."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        os.fchmod(fd, NEW_FILE_MODE)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
