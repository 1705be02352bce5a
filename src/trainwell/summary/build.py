"""summary.json's content: the groups of a sweep (or a study, or a cross-validation's folds),
their figures, best first, and the jobs that have no results with the reason.

Form (`kind`: sweep | study | cv):

    {"version": 1, "kind": "sweep",
     "sort": {"metric": "val/acc", "mode": "max"}, "pool": ["seed"],
     "common": {"trainer.max_epochs": "2"},            # settings every job shares
     "jobs": {"done": 6, "failed": 0, "missing": 0},
     "groups": [{"overrides": {"model.optimizer.lr": "0.003", ...}, "n": 3,
                 "jobs": ["2", "3", "5"], "not_done": [],  # with and without results
                 "values": [...],                               # each job's sorting metric
                 "metrics": {"test/acc": {"n": 3, "mean": ..., "std": ..., "min": ..., "max": ...}}}],
     "failed": [{"job": "4", "overrides": [...], "cause": "one line"}],
     "missing": [{"job": "5", "overrides": [...], "cause": "one line"}],
     "study": {...}   # a search: its metric, direction, best trial and pruned trials
     "cv": {...}}     # a cross-validation: folds and the out-of-fold figure
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trainwell.errors import TrainwellError
from trainwell.summary.jobs import (
    CONFIG_FILE,
    MULTIRUN_FILE,
    Job,
    expected_jobs,
    job_dirs,
    missing_jobs,
    name_order,
    override_key,
    read_jobs,
    read_yaml,
)
from trainwell.summary.stats import group_metrics, numeric_metrics

VERSION = 1


@dataclass(frozen=True)
class Settings:
    """How jobs are grouped and groups ordered (train.yaml `summary`)."""

    pool: tuple[str, ...] = ("seed",)
    metric: str | None = None  # the metric rows are sorted by, best first
    mode: str = "max"  # min | max
    search: dict[str, str] | None = None  # a search's {"metric", "direction"}


def _select(cfg: DictConfig, key: str) -> Any:
    value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def settings_from(cfg: DictConfig) -> Settings:
    """Settings from a run's config (a multirun.yaml or a job's .hydra/config.yaml): `summary.*`
    where given; else the search's metric and direction for a search, the monitored metric and
    mode (monitor.metric, monitor.mode) for any other sweep."""
    pool = _select(cfg, "summary.pool")
    if isinstance(pool, str):  # summary.pool=seed: one key
        pool = [pool]
    pool = ("seed",) if pool is None else tuple(str(k) for k in pool)
    direction = _select(cfg, "hydra.sweeper.direction")
    optimized = _select(cfg, "optimized_metric")
    search = None
    if isinstance(direction, str) and optimized:
        search = {"metric": str(optimized), "direction": direction}
    metric = _select(cfg, "summary.metric") or (search or {}).get("metric")
    metric = metric or _select(cfg, "monitor.metric")
    mode = _select(cfg, "summary.mode")
    if mode is None and search is not None and metric == search["metric"]:
        mode = "min" if direction.startswith("min") else "max"
    mode = mode or _select(cfg, "monitor.mode") or "max"
    if mode not in ("min", "max"):
        raise TrainwellError(f"summary.mode={mode} is invalid: expected min or max")
    return Settings(pool, None if metric is None else str(metric), str(mode), search)


# What the summary reads of a run's config: its settings, what their defaults follow, and what
# they may interpolate. A multirun.yaml holds the whole config (hundreds of keys): only these
# become an OmegaConf config.
_SETTINGS_KEYS = ("summary", "monitor", "optimized_metric")


def run_config(root: Path) -> dict[str, Any]:
    """The sweep's config as read from its file: its multirun.yaml (the latest launch), else
    the first job's .hydra/config.yaml (SLURM array jobs, a copied subset)."""
    path = root / MULTIRUN_FILE
    if not path.is_file():
        path = next((d / CONFIG_FILE for d in job_dirs(root) if (d / CONFIG_FILE).is_file()), path)
    return (read_yaml(path) or {}) if path.is_file() else {}


def settings_config(raw: dict[str, Any]) -> DictConfig:
    """The part of a run's config the settings come from, as a config (interpolations work)."""
    part = {k: raw[k] for k in _SETTINGS_KEYS if k in raw}
    direction = ((raw.get("hydra") or {}).get("sweeper") or {}).get("direction")
    if direction is not None:
        part["hydra"] = {"sweeper": {"direction": direction}}
    return OmegaConf.create(part)


def _parse(overrides: list[str]) -> dict[str, str]:
    return {override_key(o): o.partition("=")[2] for o in overrides}


def _sort_key(group: dict[str, Any], metric: str | None, mode: str) -> tuple[int, float]:
    mean = ((group["metrics"].get(metric) or {}).get("mean")) if metric else None
    if mean is None or math.isnan(mean):
        return (1, 0.0)  # groups without the metric (or with a NaN) go last
    return (0, -mean if mode == "max" else mean)


def group_jobs(jobs: list[Job], settings: Settings) -> list[dict[str, Any]]:
    """Jobs with the same settings outside `settings.pool` form one group; groups best first."""
    pooled = set(settings.pool)
    groups: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    members: dict[tuple[tuple[str, str], ...], list[Job]] = {}
    for job in jobs:
        mine = {k: v for k, v in _parse(job.overrides).items() if k not in pooled}
        identity = tuple(sorted(mine.items()))
        if identity not in groups:
            groups[identity] = {"overrides": mine, "n": 0, "jobs": [], "not_done": []}
            members[identity] = []
        members[identity].append(job)
    for identity, group in groups.items():
        ordered = sorted(members[identity], key=lambda j: name_order(j.name))
        done = [j for j in ordered if j.done]
        group["n"] = len(done)
        group["jobs"] = [j.name for j in done]
        group["not_done"] = [j.name for j in ordered if not j.done]
        group["metrics"] = group_metrics(j.metrics or {} for j in done)
        # Each job's value of the sorting metric, in the order of "jobs": the plot's dots.
        group["values"] = [_finite((j.metrics or {}).get(settings.metric or "")) for j in done]
    # A stable order among equals: the order the groups' first jobs run in.
    return sorted(groups.values(), key=lambda g: _sort_key(g, settings.metric, settings.mode))


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _common(groups: list[dict[str, Any]]) -> dict[str, str]:
    """The settings every group shares (the table's columns are the others)."""
    if not groups:
        return {}
    first = groups[0]["overrides"]
    return {k: v for k, v in first.items() if all(g["overrides"].get(k) == v for g in groups)}


def _listed(jobs: list[Job]) -> list[dict[str, Any]]:
    return [{"job": j.name, "overrides": j.overrides, "cause": j.cause} for j in jobs]


def _study(jobs: list[Job], search: dict[str, str]) -> dict[str, Any]:
    """The best trial (the first of equals, as Optuna picks it) and the trial counts."""
    metric, maximize = search["metric"], search["direction"].startswith("max")
    scored = [j for j in jobs if j.done and _finite((j.metrics or {}).get(metric)) is not None]
    best = None
    for job in sorted(scored, key=lambda j: name_order(j.name)):
        value = (job.metrics or {})[metric]
        if best is None or (value > best[1] if maximize else value < best[1]):
            best = (job, value)
    pruned = sum(j.pruned for j in jobs)
    return {
        "metric": metric,
        "direction": search["direction"],
        "best_trial": None
        if best is None
        else {"job": best[0].name, "value": best[1], "overrides": best[0].overrides},
        "trials": {
            "complete": sum(j.done for j in jobs),
            "failed": sum(not j.done and not j.pruned for j in jobs),
            "pruned": pruned,
        },
    }


def summarize_jobs(
    found: list[Job], expected: list[Job] | None, settings: Settings
) -> dict[str, Any]:
    missing = missing_jobs(found, expected)
    groups = group_jobs(found + missing, settings)
    failed = [j for j in found if not j.done]
    summary: dict[str, Any] = {
        "version": VERSION,
        "kind": "study" if settings.search else "sweep",
        "sort": {"metric": settings.metric, "mode": settings.mode},
        "pool": list(settings.pool),
        "common": _common(groups),
        "jobs": {"done": len(found) - len(failed), "failed": len(failed), "missing": len(missing)},
        "groups": groups,
        "failed": _listed(failed),
        "missing": _listed(missing),
    }
    if settings.search:
        summary["study"] = _study(found, settings.search)
    return summary


def sweep_summary(root: Path, settings: Settings | None = None) -> dict[str, Any]:
    """The summary of the multirun dir `root`, from its jobs' files (`settings`: from its
    config unless given)."""
    raw = run_config(root)
    settings = settings or settings_from(settings_config(raw))
    multirun = raw if (root / MULTIRUN_FILE).is_file() else None
    return summarize_jobs(read_jobs(root), expected_jobs(multirun), settings)


# The per-fold figures that describe the fold rather than score it.
_FOLD_FIELDS = ("fold", "samples")


def headline(cv: dict[str, Any]) -> tuple[str, str | None]:
    """(the figure a CV reports first, its mode): the monitored metric when every fold logged
    it, else the out-of-fold accuracy's per-fold figure (`acc`) of a classifier."""
    monitor = cv.get("monitor") or {}
    metric = monitor.get("metric")
    if metric in cv["mean"]:
        return metric, monitor.get("mode")
    if "acc" in cv["mean"]:
        return "acc", "max"
    return next(iter(cv["mean"]), "samples"), None


def cv_summary(cv: dict[str, Any]) -> dict[str, Any]:
    """A cross-validation's folds as one group (n = folds), sorted by nothing: the same form as
    a sweep's, with `cv` holding the fold count and the out-of-fold figure."""
    jobs = [
        Job(
            f"fold_{int(figures['fold'])}",
            [],
            numeric_metrics({k: v for k, v in figures.items() if k not in _FOLD_FIELDS}),
        )
        for figures in cv["per_fold"]
    ]
    metric, mode = headline(cv)
    summary = summarize_jobs(jobs, None, Settings(pool=(), metric=metric, mode=mode or "max"))
    summary["kind"] = "cv"
    summary["cv"] = {"folds": cv["folds"], "oof": cv["oof"]}
    return summary
