"""Lightning's CSV logger: the file system behind its writer."""

from __future__ import annotations

from typing import Any

# ---------------------------------------------------------------------------------------------
# Lightning's CSV ExperimentWriter deletes an existing metrics.csv when it starts
# (`ExperimentWriter._check_log_dir_exists`, lightning.fabric 2.x, seen in 2.6.6; documented as
# "Previous log files in this directory will be deleted"), so a run resumed in the same dir
# wipes the rows of the attempt before it. The template's AppendingCSVLogger (io/csv_append.py)
# keeps the file and reads its header through the writer's and logger's fsspec file system,
# which Lightning keeps private.
# ---------------------------------------------------------------------------------------------


def csv_filesystem(logger_or_writer: Any) -> Any:
    """The fsspec file system a CSVLogger or its ExperimentWriter writes through."""
    return logger_or_writer._fs
