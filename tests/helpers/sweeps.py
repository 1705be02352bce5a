"""Multirun dirs written as Hydra and train.py leave them (multirun.yaml, <job>/.hydra/overrides.yaml,
<job>/results.json), with chosen metrics: the summary's arithmetic checked without training."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.killer import KillAt
from trainwell.summary.jobs import BASIC_SWEEPER

OPTUNA_SWEEPER = "hydra_plugins.trainwell_optuna_sweeper.optuna_sweeper.TrainwellOptunaSweeper"


def write_multirun_yaml(
    root: Path,
    task: list[str],
    *,
    sweeper: str = BASIC_SWEEPER,
    monitor: tuple[str, str] = ("val/acc", "max"),
    summary: dict[str, Any] | None = None,
    **top: Any,
) -> None:
    cfg = {
        "summary": {"pool": ["seed"], "metric": None, "mode": None, **(summary or {})},
        "monitor": {"metric": monitor[0], "mode": monitor[1]},
        "optimized_metric": None,
        **top,
        "hydra": {"sweeper": {"_target_": sweeper, "params": None}, "overrides": {"task": task}},
    }
    if "direction" in top:
        cfg["hydra"]["sweeper"]["direction"] = cfg.pop("direction")
    root.mkdir(parents=True, exist_ok=True)
    (root / "multirun.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def write_job(
    root: Path, name: str, overrides: list[str], metrics: dict[str, float] | None
) -> Path:
    job = root / name
    (job / ".hydra").mkdir(parents=True, exist_ok=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if metrics is not None:
        (job / "results.json").write_text(json.dumps({"metrics": metrics, "plan": {}}))
    return job


# test/acc and val/acc of each (lr, seed) job of `seed=1,2,3 model.optimizer.lr=0.001,0.003`:
# lr=0.003 is the better group on val/acc, by a margin the spread does not hide.
SWEEP = ["seed=1,2,3", "model.optimizer.lr=0.001,0.003"]
LRS = ("0.001", "0.003")
SEEDS = ("1", "2", "3")
TEST_ACC = {"0.001": [0.9125, 0.9350, 0.9610], "0.003": [0.9540, 0.9705, 0.9755]}
VAL_ACC = {"0.001": [0.9200, 0.9300, 0.9500], "0.003": [0.9600, 0.9650, 0.9800]}


def seeds_and_lrs(root: Path, extra: tuple[str, ...] = ("trainer.max_epochs=2",)) -> list[Path]:
    """A finished `-m seed=1,2,3 model.optimizer.lr=0.001,0.003` sweep, jobs numbered as Hydra
    numbers them (seed outermost, as the command line orders the keys)."""
    write_multirun_yaml(root, [*SWEEP, *extra])
    jobs = []
    for number, (seed, lr) in enumerate(itertools.product(SEEDS, LRS)):
        i = SEEDS.index(seed)
        metrics = {
            "test/acc": TEST_ACC[lr][i],
            "val/acc": VAL_ACC[lr][i],
            "test/loss": 1.0 - TEST_ACC[lr][i],
            "test/recall/0": 1.0,
        }
        overrides = [f"seed={seed}", f"model.optimizer.lr={lr}", *extra]
        jobs.append(write_job(root, str(number), overrides, metrics))
    return jobs


class KillInJob(KillAt):
    """KillAt in one job of a multirun only: `where` is `${paths.output_dir}`, which resolves
    to each job's dir (`<sweep dir>/<job number>`); in every other job it never fires. The
    basic launcher runs every job in the sweep's process: the whole sweep dies there."""

    def __init__(self, job: int, where: str, batch: int, phase: str = "batch_end") -> None:
        super().__init__(batch=batch, phase=phase)
        if Path(where).name != str(job):
            self.batch = 10**9
