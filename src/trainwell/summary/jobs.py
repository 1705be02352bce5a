"""The jobs of a multirun dir, read from the files each job leaves: the overrides it ran with, its
final metrics or the one-line reason it has none, and the jobs the sweep's own overrides say
should be there.

Only files are read (never a study database or a launcher's state), so the same answer comes
from the live sweep, from SLURM array jobs, from several launches into one dir and from a copy.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainwell.errors import TrainwellError, first_line
from trainwell.io.results import PRUNING_FILE
from trainwell.summary.stats import numeric_metrics

OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"
CONFIG_FILE = Path(".hydra") / "config.yaml"
MULTIRUN_FILE = "multirun.yaml"
RESULTS_FILE = "results.json"
# One line: why the latest attempt of a multirun job failed (written at the job's end, removed
# when the job starts again).
FAILURE_FILE = "failure.txt"
NOT_FINISHED = (
    "no results.json: still running, or stopped before its end (killed, out of time or memory)"
)
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"

# Overrides that say where a run lives or how it starts, not what it trains: a sweep relaunched
# with resume=auto is the same sweep, and its jobs the same groups.
_BOOKKEEPING = frozenset({"run_id", "resume"})
_BOOKKEEPING_PREFIXES = ("summary.", "pruning.", "hydra.")

# The C loader where PyYAML has it: a sweep of hundreds of jobs reads hundreds of small files.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path) -> Any:
    """A job's YAML file; one that is not YAML (cut short by a killed job, edited by hand) is
    one line naming it, not a parser's traceback."""
    try:
        return yaml.load(path.read_text(), Loader=_LOADER)
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise TrainwellError(f"{path} is not readable YAML{at}: {first_line(err)}") from err


def override_key(override: str) -> str:
    """`+a.b=1`, `++a.b=1`, `~a.b` -> `a.b`."""
    return override.split("=", 1)[0].lstrip("+~")


def settings(overrides: list[str]) -> list[str]:
    """The overrides that choose what a job trains (bookkeeping such as run_id left out)."""
    return [
        o
        for o in overrides
        if override_key(o) not in _BOOKKEEPING
        and not override_key(o).startswith(_BOOKKEEPING_PREFIXES)
    ]


@dataclass
class Job:
    name: str  # the job dir, relative to the multirun dir ("3")
    overrides: list[str]  # its settings, as it got them
    metrics: dict[str, float] | None = None  # None: no results
    cause: str | None = None  # why there are no results
    pruned: bool = False  # a search trial the pruner stopped

    @property
    def done(self) -> bool:
        return self.metrics is not None


def name_order(name: str) -> tuple[int, int, str]:
    """Job numbers in numeric order (2 before 10), other names after them."""
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def job_dirs(root: Path) -> list[Path]:
    """The dirs under `root` that hold a Hydra job (its `.hydra/overrides.yaml`)."""
    found = [p.parent.parent for p in root.glob(f"*/{OVERRIDES_FILE}")]
    return sorted(found, key=lambda p: name_order(p.name))


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    return next((line for line in reversed(lines) if line), "")


def _pruned_at(job_dir: Path) -> int | None:
    path = job_dir / PRUNING_FILE
    if not path.is_file():
        return None
    step = json.loads(path.read_text()).get("pruned_at")
    return None if step is None else int(step)


def read_job(root: Path, job_dir: Path) -> Job:
    """A job from its files: results.json gives its metrics; without it (or when its latest
    attempt failed) the cause is the failure line, the pruned step, the traceback's last line,
    or 'not finished'."""
    job = Job(job_dir.name, settings([str(o) for o in read_yaml(job_dir / OVERRIDES_FILE) or []]))
    failure, results = job_dir / FAILURE_FILE, job_dir / RESULTS_FILE
    step = _pruned_at(job_dir)
    if step is not None:
        job.pruned = True
        job.cause = _last_line(failure) if failure.is_file() else f"pruned at step {step}"
    elif failure.is_file():
        job.cause = _last_line(failure) or "failed"
    elif results.is_file():
        try:
            job.metrics = numeric_metrics(json.loads(results.read_text()).get("metrics") or {})
        except (OSError, ValueError) as err:
            job.cause = f"results.json unreadable ({type(err).__name__}: {err})"
    elif (job_dir / "error.log").is_file():
        job.cause = f"{_last_line(job_dir / 'error.log')} (traceback: {job_dir.name}/error.log)"
    else:
        job.cause = NOT_FINISHED
    if job_dir.parent != root:
        job.name = str(job_dir.relative_to(root))
    return job


def read_jobs(root: Path) -> list[Job]:
    return [read_job(root, d) for d in job_dirs(root)]


def expected_jobs(multirun: Any) -> list[Job] | None:
    """The jobs a sweep of Hydra's basic sweeper launches (`multirun`: its multirun.yaml), by job
    number, with their settings: the cartesian product of its overrides in the order the sweeper
    numbers them (a key given twice keeps its first place and its last values). None for other
    sweepers: a search asks for its trials as it goes."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    hydra = (multirun or {}).get("hydra") or {}
    sweeper = hydra.get("sweeper") or {}
    if sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    arguments = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    arguments += [str(o) for o in (hydra.get("overrides") or {}).get("task") or []]
    choices: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides(arguments):
        key = override.get_key_element()
        if override.is_discrete_sweep():
            choices[key] = [f"{key}={v}" for v in override.sweep_string_iterator()]
        else:
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
    every = itertools.product(*choices.values())
    return [Job(str(number), settings(list(job))) for number, job in enumerate(every)]


def missing_jobs(found: list[Job], expected: list[Job] | None) -> list[Job]:
    """The expected jobs no job dir holds (matched by settings, whatever the dirs are named)."""
    have = {tuple(job.overrides) for job in found}
    missing = [job for job in expected or [] if tuple(job.overrides) not in have]
    for job in missing:
        job.cause = "not there: the sweep's overrides give this job and no job dir holds it"
    return missing
