"""report.md: the training-readiness note, readable without the code."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.report.verdict import Check

ICON = {"pass": "pass", "warn": "**warn**", "fail": "**FAIL**", "skip": "skip"}


def table(checks: list[Check]) -> list[str]:
    lines = ["| check | status | finding | seconds |", "|---|---|---|---|"]
    for c in checks:
        message = c.message.replace("|", "\\|")
        lines.append(f"| `{c.id}` | {ICON[c.status]} | {message} | {c.seconds:.2f} |")
    return lines


def render(
    experiment: str,
    summary: dict[str, Any],
    plan_lines: list[str],
    checks: list[Check],
    plots: dict[str, str],
) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in ("pass", "warn", "fail", "skip")}
    verdict = (
        "NOT READY: fix the failing checks before spending compute"
        if counts["fail"]
        else "ready for a longer run" + (" (read the warnings)" if counts["warn"] else "")
    )
    out = [
        f"# Training readiness: `{experiment}`",
        "",
        f"**Verdict: {verdict}.** {counts['pass']} pass, {counts['warn']} warn, "
        f"{counts['fail']} fail, {counts['skip']} skip.",
        "",
        "## The experiment",
        "",
    ]
    out += [f"- **{k}**: {v}" for k, v in summary.items()]
    out += ["", "## Training plan", ""] + [f"- {line}" for line in plan_lines]
    out += ["", "## Checks", "", *table(checks)]
    risks = [c for c in checks if c.status in ("fail", "warn", "skip")]
    out += ["", "## Risks left", ""]
    if risks:
        out += [f"- `{c.id}` ({c.status}): {c.message}" for c in risks]
    else:
        out.append("- none found by the probes; the probes ran on a small fixed batch on CPU")
    out.append(
        "- the probes run a few steps on CPU: numerical issues that appear only at scale, in "
        "mixed precision or across DDP ranks are outside what they can see"
    )
    if plots:
        out += ["", "## Plots", ""]
        out += [f"![{title}]({name})" for title, name in plots.items()]
    return "\n".join(out) + "\n"
