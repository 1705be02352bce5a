"""results.json: the run's machine-readable outcome, written atomically (and other files so)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

# A search trial's reported values and the step it was pruned at, if it was (callbacks/pruning.py);
# the sweep summary counts pruned trials from it.
PRUNING_FILE = "pruning.json"


def write_results(path: Path, results: dict[str, Any]) -> None:
    """Write via a temp file + rename: a reader (a sweep script, a scheduler) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".results-", suffix=".json")
    try:
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
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
