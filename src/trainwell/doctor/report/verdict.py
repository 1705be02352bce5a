"""The doctor's verdicts: one `Check` per registered id, written as report.json."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATUSES = ("pass", "warn", "fail", "skip")


@dataclass
class Check:
    """One verdict: `message` names the cause and the fix in one sentence; numbers go in evidence."""

    id: str
    status: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r} for {self.id}")


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
