"""A check returns a `Verdict`; the registry stamps its id into the report's `Check`, written as
report.json and report.md (the training-readiness note, readable without the code)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ICON = {"pass": "pass", "warn": "**warn**", "fail": "**FAIL**", "skip": "skip"}  # in report.md
STATUSES = tuple(ICON)


@dataclass
class Verdict:
    """`message` names the cause and the fix in one sentence (its numbers go in the check's
    evidence dict). `seconds`: the time of a shared probe run before the check that it reports."""

    status: str
    message: str
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")


passes, warns, fails, skips = (partial(Verdict, status) for status in STATUSES)


@dataclass
class Check:
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
    finite = isinstance(value, float) and math.isfinite(value)
    return value if finite or isinstance(value, bool | int | str) or value is None else str(value)


def write_json(path: Path, experiment: str, checks: list[Check], extra: dict[str, Any]) -> None:
    report = {"version": 1, "experiment": experiment, "checks": [asdict(c) for c in checks]}
    path.write_text(json.dumps(_jsonable(report | extra), indent=2, allow_nan=False) + "\n")


def render(
    experiment: str,
    summary: dict[str, Any],
    plan_lines: list[str],
    checks: list[Check],
    plots: dict[str, str],
) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    verdict = (
        "NOT READY: fix the failing checks before spending compute"
        if counts["fail"]
        else "ready for a longer run" + (" (read the warnings)" if counts["warn"] else "")
    )
    tally = ", ".join(f"{n} {status}" for status, n in counts.items())
    out = [f"# Training readiness: `{experiment}`", "", f"**Verdict: {verdict}.** {tally}.", ""]
    out += ["## The experiment", "", *(f"- **{k}**: {v}" for k, v in summary.items())]
    out += ["", "## Training plan", ""] + [f"- {line}" for line in plan_lines]
    out += ["", "## Checks", "", "| check | status | finding | seconds |", "|---|---|---|---|"]
    for c in checks:
        message = c.message.replace("|", "\\|")
        out.append(f"| `{c.id}` | {ICON[c.status]} | {message} | {c.seconds:.2f} |")
    risks = [f"- `{c.id}` ({c.status}): {c.message}" for c in checks if c.status != "pass"]
    out += ["", "## Risks left", ""]
    out += risks or ["- none found by the probes; the probes ran on a small fixed batch on CPU"]
    out.append(
        "- the probes run a few steps on CPU: numerical issues that appear only at scale, in "
        "mixed precision or across DDP ranks are outside what they can see"
    )
    if plots:
        out += ["", "## Plots", "", *(f"![{title}]({name})" for title, name in plots.items())]
    return "\n".join(out) + "\n"
