"""`python tests/helpers/logged_writes.py scripts/train.py <overrides>`: the script, with every
write of a file the run's processes share logged to $WRITES_LOG as `<what> <pid> <rank vars>`,
so a test launched as several ranks can tell which processes wrote what."""

from __future__ import annotations

import functools
import os
import runpy
import sys
from collections.abc import Callable
from typing import Any

RANK_VARS = ("RANK", "GROUP_RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID")


def _logged(what: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ranks = ",".join(f"{name}={os.environ.get(name, '-')}" for name in RANK_VARS)
        with open(os.environ["WRITES_LOG"], "a") as log:
            log.write(f"{what} {os.getpid()} {ranks}\n")
        return func(*args, **kwargs)

    return wrapper


def _patch() -> None:
    import trainwell.io.run_lock as run_lock
    import trainwell.summary.write as summary_write
    import trainwell.training.cv.run as cv_run

    for name in ("write_folds", "write_fold_predictions", "write_results", "write_summary"):
        setattr(cv_run, name, _logged(f"cv.{name}", getattr(cv_run, name)))
    # The sweep summary's callback imports update_summary when a job ends: the module's name.
    summary_write.update_summary = _logged("sweep.update_summary", summary_write.update_summary)
    run_lock.lock_run_dir = _logged("run_dir.lock", run_lock.lock_run_dir)


if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    import _bootstrap  # noqa: F401  (the script's own checkout first on the import path)

    _patch()
    runpy.run_path(script, run_name="__main__")
