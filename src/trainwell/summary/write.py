"""Writing summary.json, summary.md and summary.png into a dir, one writer at a time.

Jobs of a sweep end on several nodes at once (SLURM arrays): each rebuilds the summary from every
job's files while holding `<dir>/.summary.lock`, so the last one to end writes a summary that has
every job that ended before it. Each file is replaced atomically: a reader sees the old summary or
the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from trainwell.errors import TrainwellError
from trainwell.io.results import write_text
from trainwell.summary.build import (
    Settings,
    cv_summary,
    run_config,
    settings_config,
    settings_from,
    sweep_summary,
)
from trainwell.summary.jobs import (
    MULTIRUN_FILE,
    NOT_FINISHED,
    RESULTS_FILE,
    job_dirs,
)
from trainwell.summary.render import PNG_NAME, markdown, plot

JSON_NAME = "summary.json"
MD_NAME = "summary.md"
LOCK_NAME = ".summary.lock"
LOCK_WAIT_S = 60.0
# Filesystems without working locks answer with one of these instead of granting or refusing.
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class SummaryLocked(Exception):
    """Another process held the summary lock for longer than LOCK_WAIT_S."""


@contextlib.contextmanager
def summary_lock(out_dir: Path) -> Iterator[None]:
    """An exclusive POSIX record lock on <dir>/.summary.lock (dropped by the kernel, or the NFS
    lock manager, when its holder dies), waited for up to LOCK_WAIT_S. A filesystem without
    locks gets no lock: a rare lost update, which the next job's end or summarize.py repairs."""
    fd = os.open(out_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as err:
                if err.errno in _NO_LOCKS:
                    break
                if err.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
                if time.monotonic() > deadline:
                    raise SummaryLocked(
                        f"{out_dir / LOCK_NAME} held for {LOCK_WAIT_S:.0f} s by another process"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_png(out_dir: Path, summary: dict[str, Any]) -> bool:
    """summary.png through a temp file and a rename (created as other run-dir files are, under
    the umask); a stale plot is removed when there is nothing to draw."""
    png = plot(summary)
    final = out_dir / PNG_NAME
    if png is None:
        final.unlink(missing_ok=True)
        return False
    tmp = out_dir / f".{PNG_NAME}-{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(png)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def outstanding(summary: dict[str, Any]) -> bool:
    """Whether some job may still end: one not finished (running, or killed) or not there yet."""
    return bool(summary["missing"]) or any(j["cause"] == NOT_FINISHED for j in summary["failed"])


def write_summary(out_dir: Path, summary: dict[str, Any], draw: bool = True) -> Path:
    """summary.json and summary.md into `out_dir`, and with `draw` summary.png (else a plot of
    an earlier state is removed); returns summary.md's path."""
    drawn = _write_png(out_dir, summary) if draw else False
    if not draw:
        (out_dir / PNG_NAME).unlink(missing_ok=True)
    write_text(out_dir / JSON_NAME, json.dumps(summary, indent=2, allow_nan=False) + "\n")
    write_text(out_dir / MD_NAME, markdown(summary, drawn))
    return out_dir / MD_NAME


def update_summary(root: Path, settings: Settings | None = None, final: bool = False) -> Path:
    """Rebuild the summary of the multirun dir `root` from its jobs' files and write it; returns
    summary.md's path. The plot (a tenth of a second for a few groups, more for many) is drawn
    once no job is outstanding, and always when `final` (the sweep's end, summarize.py): a job's
    end costs the tables alone."""
    with summary_lock(root):
        summary = sweep_summary(root, settings)
        return write_summary(root, summary, draw=final or not outstanding(summary))


def rebuild(root: Path, overrides: list[str] | None = None) -> Path:
    """scripts/summarize.py: the summary of `root` rebuilt from its files: a cross-validation
    run dir (its results.json `cv`) or a multirun dir (its jobs). `overrides`: `summary.*`
    settings in place of the ones the jobs ran with (`summary.pool=[seed,data.seed]`)."""
    results = root / RESULTS_FILE
    cv = json.loads(results.read_text()).get("cv") or {} if results.is_file() else {}
    if "per_fold" in cv:  # a cross-validation run, or fold jobs joined by cv_assemble.py
        with summary_lock(root):
            return write_summary(root, cv_summary(cv))
    if not job_dirs(root) and not (root / MULTIRUN_FILE).is_file():
        what = "is one run" if results.is_file() else "holds no jobs (no */.hydra/overrides.yaml)"
        raise TrainwellError(
            f"{root} {what}: give a multirun dir (logs/<task>/multiruns/<id>) or a "
            "cross-validation run dir"
        )
    given = list(overrides or [])
    wrong = [o for o in given if not o.startswith("summary.")]
    if wrong:
        raise TrainwellError(
            f"{wrong[0]}: summarize.py takes summary.pool=[...], summary.metric=<name> and "
            "summary.mode=min|max"
        )
    cfg = OmegaConf.merge(settings_config(run_config(root)), OmegaConf.from_dotlist(given))
    return update_summary(root, settings_from(cfg), final=True)
