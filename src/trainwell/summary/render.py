"""summary.md (a Markdown table, the same rows as a LaTeX table, the jobs) and summary.png (each
group's metric: its jobs as dots, mean ± sample std as a bar), from summary.json's content."""

from __future__ import annotations

import io
from typing import Any

PNG_NAME = "summary.png"
_TITLES = {"sweep": "Sweep", "study": "Search", "cv": "Cross-validation"}


def shown_metrics(summary: dict[str, Any]) -> list[str]:
    """The table's metric columns: the sorting metric, then the test metrics (val metrics when
    nothing was tested), one level deep (`test/acc`, not `test/recall/3`); summary.json holds
    all of them. A cross-validation shows every per-fold figure."""
    names = sorted({m for g in summary["groups"] for m in g["metrics"]})
    flat = [m for m in names if m.count("/") <= 1]
    if summary["kind"] == "cv":
        chosen = flat
    else:
        chosen = [m for m in flat if m.startswith("test/")] or [
            m for m in flat if m.startswith("val/")
        ]
    first = summary["sort"]["metric"]
    return ([first] if first in names else []) + [m for m in chosen if m != first]


def varying_keys(summary: dict[str, Any]) -> list[str]:
    """The settings that tell the groups apart, in the order the jobs give them."""
    keys: list[str] = []
    for group in summary["groups"]:
        keys += [k for k in group["overrides"] if k not in keys]
    return [k for k in keys if k not in summary["common"]]


def _figure(stats: dict[str, Any] | None, sep: str) -> str:
    if not stats or stats["mean"] is None:
        return "nan" if stats else ""
    if stats["std"] is None:
        return f"{stats['mean']:.4f}"
    return f"{stats['mean']:.4f}{sep}{stats['std']:.4f}"


def rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the table, groups best first."""
    keys, metrics = varying_keys(summary), shown_metrics(summary)
    header = [*keys, "n", *metrics]
    body = [
        [
            *(g["overrides"].get(k, "") for k in keys),
            str(g["n"]) + (f" of {g['n'] + len(g['not_done'])}" if g["not_done"] else ""),
            *(_figure(g["metrics"].get(m), " ± ") for m in metrics),
        ]
        for g in summary["groups"]
    ]
    return header, body


def _label(group: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k}={group['overrides'][k]}" for k in keys if k in group["overrides"])


def _latex_escape(text: str) -> str:
    for char in ("\\", "&", "%", "$", "#", "_", "{", "}"):
        text = text.replace(char, "\\" + char if char != "\\" else "\\textbackslash{}")
    return text


def latex(summary: dict[str, Any]) -> str:
    """The same rows as a booktabs tabular, each figure as $mean \\pm std$."""
    header, _ = rows(summary)
    keys, metrics = varying_keys(summary), shown_metrics(summary)
    lines = [
        "\\begin{tabular}{" + "l" * len(keys) + "r" * (1 + len(metrics)) + "}",
        "\\toprule",
        " & ".join(_latex_escape(h) for h in header) + " \\\\",
        "\\midrule",
    ]
    for g in summary["groups"]:
        cells = [_latex_escape(g["overrides"].get(k, "")) for k in keys] + [str(g["n"])]
        for m in metrics:
            figure = _figure(g["metrics"].get(m), " \\pm ")
            cells.append(f"${figure}$" if figure else "")
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines)


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return [line(header), line(["---"] * len(header)), *(line(r) for r in body)]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def markdown(summary: dict[str, Any], has_plot: bool) -> str:
    kind, sort = summary["kind"], summary["sort"]
    counts = summary["jobs"]
    keys = varying_keys(summary)
    out = [f"# {_TITLES[kind]} summary", ""]
    done = f"{_count(counts['done'], 'job')} with results"
    if counts["failed"] or counts["missing"]:
        done += f", {counts['failed']} without, {counts['missing']} missing"
    if kind == "cv":
        oof, sort = summary["cv"]["oof"], summary["sort"]
        lead = f"{summary['cv']['folds']} folds, led by {sort['metric']} ({sort['mode']}); "
        if "acc" in oof:
            lead += f"out-of-fold acc {oof['acc']:.4f} over {oof['samples']} samples. "
        else:
            lead += f"{oof['samples']} out-of-fold samples. "
        out.append(lead + "Mean ± sample std over the folds.")
    else:
        pooled = ", ".join(summary["pool"]) or "nothing"
        out.append(
            f"{done}; {_count(len(summary['groups']), 'group')} (every override but {pooled}). "
            f"Mean ± sample std over each group's jobs; rows sorted by {sort['metric']} "
            f"({sort['mode']}), best first. Every metric: summary.json."
        )
    if summary["common"]:
        shared = " ".join(f"{k}={v}" for k, v in summary["common"].items())
        out += ["", f"Every job: `{shared}`"]
    study = summary.get("study")
    if study:
        best, trials = study["best_trial"], study["trials"]
        out += ["", f"Trials: {trials['complete']} complete, {trials['failed']} failed, "
                f"{trials['pruned']} pruned."]  # fmt: skip
        if best is not None:
            out.append(
                f"Best trial {best['job']}: {study['metric']}={best['value']} "
                f"({study['direction']}) with `{' '.join(best['overrides'])}`."
            )
    out += ["", *_table(*rows(summary)), ""]
    out += ["Jobs:", ""]
    for group in summary["groups"]:
        label = _label(group, keys) or "every job"
        jobs = ", ".join(group["jobs"]) or "none"
        extra = f" (without results: {', '.join(group['not_done'])})" if group["not_done"] else ""
        out.append(f"- {label}: {jobs}{extra}")
    for title, listed in (("Without results", summary["failed"]), ("Missing", summary["missing"])):
        if listed:
            out += ["", f"{title}:", ""]
            out += [
                f"- job {j['job']} (`{' '.join(j['overrides'])}`): {j['cause']}" for j in listed
            ]
    out += ["", "LaTeX (booktabs):", "", "```latex", latex(summary), "```"]
    if has_plot:
        out += ["", f"![{sort['metric']} per group]({PNG_NAME})"]
    elif summary["groups"] and kind != "cv":
        out += ["", f"{PNG_NAME} (each group's {sort['metric']}) is drawn once every job has "
                "ended, or by `python scripts/summarize.py <this dir>`."]  # fmt: skip
    return "\n".join(out) + "\n"


def plot(summary: dict[str, Any]) -> bytes | None:
    """summary.png's bytes: the sorting metric of each group, best first: every job a dot, the
    mean with its sample std as an error bar. None when no group has the metric."""
    metric = summary["sort"]["metric"]
    groups = [g for g in summary["groups"] if metric in g["metrics"]]
    if not groups:
        return None
    # The object API, not pyplot: no global figure state, safe in any thread or process.
    from matplotlib.figure import Figure

    keys = varying_keys(summary)
    labels = [_label(g, keys) or "every job" for g in groups]
    fig = Figure(figsize=(min(4.0 + 1.2 * len(groups), 24.0), 4.5))
    ax = fig.subplots()
    for x, group in enumerate(groups):
        stats = group["metrics"][metric]
        values = [v for v in group["values"] if v is not None]
        ax.plot([x] * len(values), values, "o", color="0.6", markersize=4, zorder=1)
        if stats["mean"] is not None:
            ax.errorbar(
                x, stats["mean"], yerr=stats["std"] or 0.0, fmt="s", color="C0", capsize=5,
                markersize=6, zorder=2,
            )  # fmt: skip
    rotate = len(groups) > 3 or max(len(label) for label in labels) > 24
    ax.set_xticks(
        range(len(groups)), labels, rotation=30 if rotate else 0, ha="right" if rotate else "center"
    )
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per group, best first\njobs (dots), mean ± sample std (bars)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100, metadata={"Software": None})
    return out.getvalue()
