"""The doctor's verdicts: a check returns a `Verdict`; the registry stamps its id into the
report's `Check`, written as report.json."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATUSES = ("pass", "warn", "fail", "skip")


@dataclass
class Verdict:
    """What a check returns: `message` names the cause and the fix in one sentence (its numbers
    go in the evidence dict the registry hands the check). `seconds`: the time of a shared probe
    run before the check that it reports."""

    status: str
    message: str
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")


def passes(message: str) -> Verdict:
    return Verdict("pass", message)


def warns(message: str) -> Verdict:
    return Verdict("warn", message)


def fails(message: str) -> Verdict:
    return Verdict("fail", message)


def skips(message: str) -> Verdict:
    return Verdict("skip", message)


@dataclass
class Check:
    """One entry of the report: a check's verdict under its registered id."""

    id: str
    status: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _jsonable(value: Any) -> Any:
    """Evidence holds numbers; NaN/Inf become strings so report.json stays strict JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)


def report_dict(experiment: str, checks: list[Check], extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "experiment": experiment,
        "checks": [_jsonable(asdict(c)) for c in checks],
        **_jsonable(extra),
    }


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")


def exit_code(checks: list[Check]) -> int:
    """0 when nothing failed, 1 when at least one check failed."""
    return 1 if any(c.status == "fail" for c in checks) else 0
