"""Optuna pruning inside a trial of `hparams_search=... hydra.sweeper.pruner=...`.

The sweeper passes the trial its study, storage and number (`pruning.*`) and keeps the pruner's
config in the study (user attr `pruner`). The trial reports its optimized metric after every
validation (per fold in a cross-validation), asks the pruner, and keeps what it reported in
`<run dir>/pruning.json`; a hopeless trial stops with TrialPruned. The sweeper replays the
reported values into the study and records the trial as pruned, so a continued search never
reruns it. Only public Optuna API: the trial's decision uses a copy of its frozen trial with
the values reported so far.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from trainwell.errors import TrainwellError
from trainwell.io.results import PRUNING_FILE, write_results

PRUNER_ATTR = "pruner"


class TrialPruned(TrainwellError):
    """The pruner found the trial hopeless: the job ends, the sweeper records it as pruned."""

    # A trial stopped as the search asked is no error: "error:" on it would send users looking.
    label = "stopped"


class TrialPruning:
    """One trial's intermediate values and the pruner's verdict on them."""

    def __init__(self, settings: DictConfig, metric: str, run_dir: Path) -> None:
        self.study_name = str(settings.study)
        self.storage = str(settings.storage)
        self.number = int(settings.trial)
        self.metric = metric
        self.path = run_dir / PRUNING_FILE
        self.values: dict[int, float] = {}

    def report(self, step: int, value: float) -> None:
        """Record `value` at `step`; raise TrialPruned when the pruner says so."""
        import optuna

        self.values[step] = value
        study = optuna.load_study(study_name=self.study_name, storage=self.storage)
        pruner = instantiate(study.user_attrs[PRUNER_ATTR])
        frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == self.number)
        mine = copy.deepcopy(frozen)
        mine.intermediate_values = dict(self.values)
        pruned = math.isnan(value) or bool(pruner.prune(study, mine))
        write_results(
            self.path,
            {
                "values": {str(s): v for s, v in self.values.items()},
                "pruned_at": step if pruned else None,
            },
        )
        if pruned:
            raise TrialPruned(
                f"trial {self.number} pruned at step {step}: {self.metric}={value} "
                f"({type(pruner).__name__})"
            )


def trial_pruning(cfg: DictConfig, run_dir: Path) -> TrialPruning | None:
    """The trial's pruning, when the sweeper asked for it (`pruning.trial` set)."""
    settings = OmegaConf.select(cfg, "pruning")
    if settings is None or settings.get("trial") is None:
        return None
    metric = cfg.get("optimized_metric")
    if not metric:
        raise TrainwellError("pruning needs optimized_metric=<the metric the search optimizes>")
    return TrialPruning(settings, str(metric), run_dir)


class OptunaPruning(L.Callback):
    """After every validation: report the optimized metric (step = epoch) and stop a hopeless
    trial. Single-process trials only: ranks deciding on their own could disagree and hang."""

    def __init__(self, pruning: TrialPruning) -> None:
        self.pruning = pruning

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.world_size > 1:
            raise TrainwellError(
                "hydra.sweeper.pruner prunes single-process trials; drop the pruner or run "
                "trials on one device"
            )

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value: Any = trainer.callback_metrics.get(self.pruning.metric)
        if value is not None:
            self.pruning.report(trainer.current_epoch, float(value))
