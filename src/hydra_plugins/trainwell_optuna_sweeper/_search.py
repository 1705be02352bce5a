"""The sweep: ask Optuna for trials, launch them as Hydra jobs, tell Optuna how each ended.

A study in persistent storage is continued: `n_trials` is the number of finished trials the
study should hold, so a relaunch after a kill runs only the missing ones. Trials that were
running when the sweep died are marked failed (and listed in the study's user attr
`interrupted_trials`); they do not count towards `n_trials`. One sweep process per study.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import optuna
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.trial import FrozenTrial, Trial, TrialState

from trainwell.callbacks.pruning import PRUNER_ATTR, PRUNING_FILE

from . import _space
from ._failures import FAILURE_ATTR, ReportFailures, SweepFailed, TrialFailed, failure_line
from ._lock import hold_sweep_lock
from ._summary import summarize

log = logging.getLogger(__name__)

_INTERRUPTED = "interrupted_trials"


class OptunaSearch:
    def __init__(
        self,
        sampler: Any,
        direction: str,
        study_name: str | None,
        storage: str | None,
        n_trials: int,
        n_jobs: int,
        params: Any,
        pruner: Any = None,
    ) -> None:
        if n_trials < 1 or n_jobs < 1:
            raise HydraException(f"n_trials and n_jobs must be >= 1 (got {n_trials}, {n_jobs})")
        self.sampler = sampler  # its config: built in sweep()
        self.direction = str(direction)
        self.study_name = None if study_name is None else str(study_name)
        self.storage = None if storage is None else str(storage)
        self.n_trials = int(n_trials)
        self.n_jobs = int(n_jobs)
        self.params = {} if params is None else dict(params)
        self.pruner = pruner
        if pruner is not None and storage is None:
            raise HydraException(
                "hydra.sweeper.pruner needs hydra.sweeper.storage (e.g. sqlite:///<sweep dir>/"
                "optuna.db): each trial reads the study to decide"
            )

    def setup(
        self, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context,
            task_function=ReportFailures(task_function),
            config=config,
        )
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.metric = str(config.get("optimized_metric") or "value")

    # -- the loop ---------------------------------------------------------------------------
    def sweep(self, arguments: list[str]) -> optuna.Study:
        space, fixed = _space.parse(
            [f"{key}={value}" for key, value in self.params.items()] + list(arguments)
        )
        if not space:
            raise SweepFailed(
                "nothing to search: hydra.sweeper.params has no sweep (choice/range/interval)"
            )
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self._lock = hold_sweep_lock(self.sweep_dir)
        OmegaConf.save(self.config, self.sweep_dir / "multirun.yaml")
        study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            sampler=self._sampler(0),
            direction=self.direction,
            load_if_exists=True,
        )
        if self.pruner is not None:  # what each trial instantiates to decide (callbacks/pruning.py)
            node = self.pruner
            pruner = OmegaConf.to_container(node) if OmegaConf.is_config(node) else dict(node)
            study.set_user_attr(PRUNER_ATTR, pruner)
        interrupted = self._fail_interrupted(study)
        done = self._finished(study)
        where = f"study '{study.study_name}' in {self.storage or 'memory'}"
        if study.trials:
            # A sampler seeded as in the first launch would suggest the first launch's points
            # again (random start-up trials ignore the history): seed + trials so far, still
            # reproducible from the study's state.
            study.sampler = self._sampler(len(study.trials))
            print(
                f"continuing {where}: {len(done)} of {self.n_trials} trials done"
                + (f", {len(interrupted)} interrupted (marked failed)" if interrupted else ""),
                flush=True,
            )
        else:
            print(f"new {where}: {self.n_trials} trials", flush=True)

        self.exhausted = False
        while len(done) < self.n_trials and not self.exhausted:
            batch = min(self.n_jobs, self.n_trials - len(done))
            trials = [study.ask(fixed_distributions=space) for _ in range(batch)]
            numbers = [t.number for t in trials]
            if numbers != list(range(numbers[0], numbers[0] + batch)):
                raise SweepFailed(f"another process is asking trials of {where} ({numbers})")
            overrides = [
                tuple(
                    [_space.as_override(k, v) for k, v in t.params.items()]
                    + [f"{k}={v}" for k, v in fixed.items()]
                )
                for t in trials
            ]
            for trial, job in zip(trials, overrides, strict=True):
                trial.set_user_attr("overrides", list(job))
            if self.pruner is not None:
                overrides = [
                    (*job, *self._pruning(study, t))
                    for job, t in zip(overrides, trials, strict=True)
                ]
            # The job number is the trial number: trial N runs in <sweep dir>/N, on every launch.
            try:
                returns = self.launcher.launch(overrides, initial_job_idx=numbers[0])
            except BaseException:
                # Not launched (a composition error, sbatch refused, Ctrl-C): not trials that ran.
                self._mark_interrupted(study, numbers)
                raise
            for trial, ret in zip(trials, returns, strict=True):
                self._tell(study, trial, ret)
            done = self._finished(study)
        if self.exhausted:
            print(f"the sampler tried every point of the search space ({len(done)} trials)")
        summarize(
            study,
            self._finished(study),
            where,
            metric=self.metric,
            direction=self.direction,
            storage=self.storage,
            sweep_dir=self.sweep_dir,
        )
        return study

    # -- bookkeeping --------------------------------------------------------------------------
    def _sampler(self, offset: int) -> optuna.samplers.BaseSampler:
        if self.sampler is None:
            return optuna.samplers.TPESampler()
        node = OmegaConf.create(self.sampler) if isinstance(self.sampler, dict) else self.sampler
        seed = node.get("seed")
        extra = {"seed": int(seed) + offset} if seed is not None and offset else {}
        return instantiate(node, **extra)

    def _fail_interrupted(self, study: optuna.Study) -> list[int]:
        """Trials left RUNNING by a sweep that was killed: failed, remembered as interrupted."""
        stale = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
        self._mark_interrupted(study, stale)
        return stale

    @staticmethod
    def _mark_interrupted(study: optuna.Study, numbers: list[int]) -> None:
        for number in numbers:
            study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
        if numbers:
            known = list(study.user_attrs.get(_INTERRUPTED, []))
            study.set_user_attr(_INTERRUPTED, sorted({*known, *numbers}))

    @staticmethod
    def _finished(study: optuna.Study) -> list[FrozenTrial]:
        interrupted = set(study.user_attrs.get(_INTERRUPTED, []))
        return [
            t
            for t in study.get_trials(deepcopy=False)
            if t.state.is_finished() and t.number not in interrupted
        ]

    def _pruning(self, study: optuna.Study, trial: Trial) -> tuple[str, ...]:
        """What a trial needs to ask the pruner: its study, storage and number."""
        return (
            f"++pruning.study={study.study_name}",
            f"++pruning.storage='{self.storage}'",
            f"++pruning.trial={trial.number}",
        )

    def _tell(self, study: optuna.Study, trial: Trial, ret: JobReturn) -> None:
        run_dir = _output_dir(ret)
        if run_dir:
            trial.set_user_attr("run_dir", run_dir)
        if self.pruner is not None and run_dir and self._replay(study, trial, Path(run_dir)):
            return
        try:
            value = ret.return_value
        except Exception as err:  # a launcher that hands back the job's exception itself
            value = TrialFailed(failure_line(err))
        if isinstance(value, TrialFailed):
            self._fail(study, trial, value.message)
            return
        try:
            number = float(value)
        except (TypeError, ValueError):
            self._fail(study, trial, f"returned {type(value).__name__}, not a number")
            raise SweepFailed(
                f"trial {trial.number} returned {type(value).__name__}, not a number to "
                f"optimize: set optimized_metric=<metric name> (train.py returns that metric)"
            ) from None
        if math.isnan(number):
            self._fail(study, trial, f"{self.metric} is nan")
            return
        self._record(study, trial, values=number)
        best = study.best_trial
        print(
            f"trial {trial.number}: {self.metric}={number} (best: trial {best.number}, {best.value})",
            flush=True,
        )

    def _replay(self, study: optuna.Study, trial: Trial, run_dir: Path) -> bool:
        """Report the values the trial reported into the study (what later trials are pruned
        against); True when the trial was pruned (then recorded as such)."""
        path = run_dir / PRUNING_FILE
        if not path.is_file():
            return False
        reported = json.loads(path.read_text())
        for step, value in sorted((int(s), v) for s, v in reported["values"].items()):
            trial.report(value, step)
        step = reported.get("pruned_at")
        if step is None:
            return False
        self._record(study, trial, state=TrialState.PRUNED)
        print(f"trial {trial.number} pruned at step {step}", flush=True)
        return True

    def _record(self, study: optuna.Study, trial: Trial, **outcome: Any) -> None:
        try:
            study.tell(trial, **outcome)
        except RuntimeError as err:
            # Grid and brute-force samplers call study.stop() once every point was tried, which
            # Optuna allows only inside optimize(); the trial is stored before that
            # (optuna/study/_tell.py: set_trial_state_values in a `finally`).
            if "Study.stop" not in str(err):
                raise
            self.exhausted = True

    def _fail(self, study: optuna.Study, trial: Trial, message: str) -> None:
        trial.set_user_attr(FAILURE_ATTR, message)
        self._record(study, trial, state=TrialState.FAIL)
        print(f"trial {trial.number} failed: {message}", flush=True)


def _output_dir(ret: JobReturn) -> str | None:
    hydra_cfg = ret.hydra_cfg
    if hydra_cfg is None:
        return None
    return str(OmegaConf.select(hydra_cfg, "hydra.runtime.output_dir", default=None) or "") or None
