"""How trials and sweeps fail: a trial that raises is a failed trial, not a failed sweep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.errors import CompactHydraException
from hydra.types import TaskFunction
from omegaconf import DictConfig

from trainwell.errors import error_line, first_line

# The study's user attr of a failed trial: its one-line cause (the summary names the first).
FAILURE_ATTR = "failure"


class SweepFailed(CompactHydraException):
    """The sweep cannot go on, or no trial completed: one line, exit 1 (Hydra prints compact
    exceptions as they are)."""


@dataclass(frozen=True)
class TrialFailed:
    """A trial's job raised: what it hands back to the sweeper instead of the exception."""

    message: str


def failure_line(err: BaseException) -> str:
    """A compact Hydra exception (a failed job's one-line cause) reads as is; any other one
    with its type."""
    return first_line(err) if isinstance(err, CompactHydraException) else error_line(err)


class ReportFailures:
    """The task function as launched: a trial that raises returns TrialFailed instead.

    Launchers differ on failed jobs: the basic launcher returns them, submitit's re-raises the
    first one from launch() and the results of the rest of the batch are lost with it.
    """

    def __init__(self, task_function: TaskFunction) -> None:
        self.task_function = task_function

    def __call__(self, cfg: DictConfig) -> Any:
        try:
            return self.task_function(cfg)
        except Exception as err:  # recorded as the trial's failure; the sweep goes on
            return TrialFailed(failure_line(err))
