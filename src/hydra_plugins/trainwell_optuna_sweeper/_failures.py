"""A trial that raises is a failed trial, not a failed sweep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.errors import CompactHydraException
from hydra.types import TaskFunction
from omegaconf import DictConfig


@dataclass(frozen=True)
class TrialFailed:
    """A trial's job raised: what it hands back to the sweeper instead of the exception."""

    message: str


def first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else ""
    if isinstance(err, CompactHydraException):
        return text or type(err).__name__
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


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
            return TrialFailed(first_line(err))
