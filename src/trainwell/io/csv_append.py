"""A CSVLogger that appends to the run dir's metrics.csv instead of deleting it.

Lightning's CSVLogger removes an existing metrics.csv when it starts, so a resumed run (same run
dir) would wipe the history of the attempt before it. Rows of steps replayed after a resume appear
twice (once per attempt); the later row is the one the final weights followed.
"""

from __future__ import annotations

import csv
import os

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from trainwell import compat


class _AppendingWriter(ExperimentWriter):
    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        fs = compat.csv_filesystem(self)
        if fs.isfile(self.metrics_file_path):
            # Known columns first, so new keys extend the header instead of failing DictWriter.
            with fs.open(self.metrics_file_path, "r", newline="") as file:
                self.metrics_keys = sorted(next(csv.reader(file), []))

    def _check_log_dir_exists(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)  # and, unlike Lightning, delete nothing


class AppendingCSVLogger(CSVLogger):
    """`lightning.pytorch.loggers.CSVLogger` whose metrics.csv survives a resume."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            compat.csv_filesystem(self).makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment
