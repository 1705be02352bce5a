"""The figures of one group: n, mean, sample std (ddof=1), min and max of each metric."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any


def describe(values: list[float]) -> dict[str, float | int | None]:
    """n, mean, sample std, min and max of `values` (at least one). The std divides by n - 1:
    the spread a new seed's score would show, not the spread of these n alone; one value has
    none (None). A NaN or an infinity among the values (a diverged job) makes every figure None:
    no figure hides it."""
    n = len(values)
    if not all(math.isfinite(v) for v in values):
        return {"n": n, "mean": None, "std": None, "min": None, "max": None}
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return {"n": n, "mean": mean, "std": std, "min": min(values), "max": max(values)}


def numeric_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The final metrics of a results.json that are numbers (bools and strings left out)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def group_metrics(per_job: Iterable[Mapping[str, float]]) -> dict[str, dict[str, Any]]:
    """Each metric that any job of the group has, described over the jobs that have it."""
    values: dict[str, list[float]] = {}
    for metrics in per_job:
        for name, value in metrics.items():
            values.setdefault(name, []).append(value)
    return {name: describe(values[name]) for name in sorted(values)}
