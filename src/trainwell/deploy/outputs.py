"""Where predict and export write, and the rule they share: nothing is replaced without a word.

    <run dir>/predictions/<what>.csv   one file per prediction, named after what was predicted:
                                       the split (`test.csv`) or the input file's stem
    <run dir>/export/                  the export of one checkpoint

An existing predictions file is replaced only with `overwrite=true`. An export is replaced without
the flag only by an export of the same checkpoint (same sha256: the same files, made again);
another checkpoint's export needs `overwrite=true`. Both checks run before any work.

The command's own Hydra run dir (logs/predict|export/runs/<id>) keeps only what explains a failure
(error.log): empty, it is removed when the command ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from trainwell.deploy import artifact
from trainwell.errors import TrainwellError

PREDICTIONS_DIR = "predictions"
EXPORT_DIR = "export"


def prediction_name(split: str, source: object) -> str:
    """`test` for split=test, `samples` for input=data/samples.npy (or a folder's name)."""
    return Path(str(source)).stem if source else split


def prediction_path(run_dir: Path, split: str, source: object, overwrite: bool) -> Path:
    """<run dir>/predictions/<what>.csv, refused in one line when it exists and `overwrite` is
    not set."""
    path = run_dir / PREDICTIONS_DIR / f"{prediction_name(split, source)}.csv"
    if path.exists() and not overwrite:
        raise TrainwellError(
            f"{path} exists (an earlier prediction of the same data); pass overwrite=true to "
            "replace it, or move it away"
        )
    return path


def check_export_target(final: Path, checkpoint_sha256: str, overwrite: bool) -> None:
    """Refuse to replace another checkpoint's export (or an export of unknown origin)."""
    if overwrite or not final.exists():
        return
    try:
        source = artifact.read_manifest(final).get("source_checkpoint") or {}
    except artifact.ExportInvalid:
        source = {}
    if source.get("sha256") == checkpoint_sha256:
        return  # the same checkpoint exported again: replaced atomically
    origin = source.get("path") or "a checkpoint this export does not name"
    raise TrainwellError(
        f"{final} holds the export of {origin}, not of this checkpoint; pass overwrite=true to "
        "replace it, or move it away"
    )


def drop_empty_run_dir(run_dir: Path) -> None:
    """Remove the command's own run dir when empty, and the logs/<task>/runs/ above it when that
    is left empty too (a hydra.run.dir= of the user's keeps its parents)."""
    above = run_dir.parent
    layout = above.name == "runs" and above.parent.name in ("predict", "export")
    for directory in (run_dir, above, above.parent) if layout else (run_dir,):
        if not directory.is_dir() or any(directory.iterdir()):
            return
        directory.rmdir()


@contextlib.contextmanager
def no_empty_run_dir() -> Iterator[None]:
    """Around a predict or export job: its Hydra run dir goes when the job wrote nothing there
    (success, or a one-line refusal). A crash keeps it: error.log is written there next."""
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else None
    try:
        yield
    except TrainwellError:
        if run_dir is not None:
            drop_empty_run_dir(run_dir)
        raise
    if run_dir is not None:
        drop_empty_run_dir(run_dir)
