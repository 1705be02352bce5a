"""PNG plots for report.md: where people would rather look than read numbers."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on clusters/CI
import matplotlib.pyplot as plt


def _save(fig: plt.Figure, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def overfit_curve(losses: list[float], out: Path) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(range(len(losses)), losses, marker=".")
    ax.set(xlabel="optimizer step", ylabel="training loss", title="Overfit one fixed batch")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    return _save(fig, out / "overfit_one_batch.png")


def grad_norms(norms: dict[str, float | None], out: Path) -> str:
    names = list(norms)
    # A NaN/Inf norm (non-finite data or loss, which data.finite and grad.flow report) is drawn
    # at the floor in red like a missing one: a NaN bar would stop the log axis, and the report.
    values = [v if v and math.isfinite(v) else 0.0 for v in norms.values()]
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.22 * len(names) + 1)))
    colors = ["tab:red" if not v else "tab:blue" for v in values]
    ax.barh(range(len(names)), [max(v, 1e-12) for v in values], color=colors)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set(
        xlabel="gradient L2 norm (first step; red: none, zero or non-finite)",
        title="Per-layer gradient norms",
        xscale="log",
    )
    return _save(fig, out / "grad_norms.png")


def lr_schedule(lrs: list[float], warmup: int, out: Path) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(range(len(lrs)), lrs)
    if warmup:
        ax.axvline(warmup, color="gray", linestyle="--", label=f"warmup end ({warmup})")
        ax.legend()
    ax.set(xlabel="optimizer step", ylabel="learning rate", title="LR over the planned steps")
    ax.grid(alpha=0.3)
    return _save(fig, out / "lr_schedule.png")
