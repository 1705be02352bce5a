"""The end of a sweep: the trial counts and the best trial, printed and written to
<sweep dir>/optimization_results.yaml."""

from __future__ import annotations

from pathlib import Path

import optuna
from omegaconf import OmegaConf
from optuna.trial import FrozenTrial, TrialState

from . import _space
from ._failures import FAILURE_ATTR, SweepFailed


def summarize(
    study: optuna.Study,
    finished: list[FrozenTrial],
    where: str,
    *,
    metric: str,
    direction: str,
    storage: str | None,
    sweep_dir: Path,
) -> None:
    """`finished`: the study's finished trials, interrupted ones left out. A sweep in which none
    completed raises SweepFailed naming the first failure."""
    complete = [t for t in finished if t.state == TrialState.COMPLETE]
    pruned = sum(t.state == TrialState.PRUNED for t in finished)
    failed = len(finished) - len(complete) - pruned
    counts = f"{len(complete)} complete, {failed} failed" + (f", {pruned} pruned" if pruned else "")
    print(f"{where}: {len(finished)} trials ({counts})", flush=True)
    if not complete:
        first = next(
            (t.user_attrs[FAILURE_ATTR] for t in finished if FAILURE_ATTR in t.user_attrs), ""
        )
        raise SweepFailed(
            f"no trial of {where} completed" + (f"; first failure: {first}" if first else "")
        )
    best = study.best_trial
    params = " ".join(_space.as_override(k, v) for k, v in best.params.items())
    print(
        f"best trial {best.number}: {metric}={best.value} with {params}"
        f" (run dir: {best.user_attrs.get('run_dir', '?')})",
        flush=True,
    )
    OmegaConf.save(
        OmegaConf.create(
            {
                "name": "optuna",
                "study_name": study.study_name,
                "storage": storage,
                "metric": metric,
                "direction": direction,
                "best_trial": best.number,
                "best_value": best.value,
                "best_params": dict(best.params),
                "best_run_dir": best.user_attrs.get("run_dir"),
                "trials": {"complete": len(complete), "failed": failed, "pruned": pruned},
            }
        ),
        sweep_dir / "optimization_results.yaml",
    )
