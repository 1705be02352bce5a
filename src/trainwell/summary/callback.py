"""The Hydra callback that keeps a multirun's summary current (train.yaml: hydra.callbacks.summary).

Hydra calls it where each job runs: in the sweep's process under the basic launcher, on the node
under submitit (SLURM), for every trial of a search. Each job's end rebuilds the summary from the
files of every job (a partial sweep has a partial summary); the sweep's end draws the plot. A job
that failed leaves its one-line cause in `<job dir>/failure.txt` (removed when it starts again).

Imported by Hydra at every start of train.py: nothing heavy at module level.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from trainwell.errors import first_line
from trainwell.io.writer import writes_shared_files


def _in_multirun(config: DictConfig) -> bool:
    from hydra.types import RunMode

    return config.hydra.mode == RunMode.MULTIRUN


def failure_line(job_return: JobReturn, job_dir: str) -> str | None:
    """The job's one-line cause, if it failed: its exception, or what a sweeper that turns
    exceptions into return values (the Optuna sweeper's TrialFailed) carries as `message`."""
    try:
        # Hydra's return_value re-raises a failed job's exception, after a line of its own on
        # stderr: Hydra prints that line again when the sweeper reads the value.
        with contextlib.redirect_stderr(io.StringIO()):
            value = job_return.return_value
    except Exception as err:
        line = first_line(err)
    else:
        message = getattr(value, "message", None)
        if job_return.status != JobStatus.COMPLETED or not isinstance(message, str):
            return None
        line = first_line(Exception(message))
    # The scripts' JobFailed names the job's dir before the cause: the summary lists it by name.
    return line.removeprefix(f"{job_dir}: ")


def warn_not_updated(sweep_dir: Path, err: Exception) -> None:
    print(
        f"warning: sweep summary not updated ({type(err).__name__}: {first_line(err)}); "
        f"once that is fixed, python scripts/summarize.py {sweep_dir} rebuilds it",
        file=sys.stderr,
        flush=True,
    )


class SweepSummary(Callback):
    """summary.json, summary.md and summary.png in every multirun dir, current at each job's end.

    Only the writer of shared files writes: submitit (and `srun python train.py -m`) runs the
    sweep in every SLURM task of a multi-task job."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not (_in_multirun(config) and writes_shared_files()):
            return
        from trainwell.summary.jobs import FAILURE_FILE

        # A job started again (a relaunch) is judged by this attempt, not by the last one's end.
        (Path(config.hydra.runtime.output_dir) / FAILURE_FILE).unlink(missing_ok=True)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if not (_in_multirun(config) and writes_shared_files()):
            return
        from trainwell.io.results import write_text
        from trainwell.summary.jobs import FAILURE_FILE
        from trainwell.summary.write import update_summary

        sweep_dir = Path(str(config.hydra.sweep.dir))
        job_dir = Path(config.hydra.runtime.output_dir)
        try:
            line = failure_line(job_return, str(job_dir))
            if line is not None and job_dir.is_dir():
                write_text(job_dir / FAILURE_FILE, line + "\n")
            update_summary(sweep_dir)
        except Exception as err:  # the job's own outcome stands; the summary can be rebuilt
            warn_not_updated(sweep_dir, err)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from trainwell.summary.write import update_summary

        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not (sweep_dir.is_dir() and writes_shared_files()):
            return  # no job was launched, or a rank of a sweep every SLURM task runs (srun -m)
        try:
            path = update_summary(sweep_dir, final=True)
        except Exception as err:
            warn_not_updated(sweep_dir, err)
            return
        print(f"sweep summary: {path}", flush=True)
