"""Optuna pruning in a search: a trial asks the pruner after every validation (per fold under
cv.folds) and stops when hopeless; the sweeper replays what it reported and records it as pruned
(so a continued search does not rerun it). The real sweep is in test_search.py (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf
from optuna.trial import TrialState

from hydra_plugins.trainwell_optuna_sweeper._search import OptunaSearch
from tests.helpers.config import OWNED, QUIET_RUN, compose_config
from tests.helpers.cv import CV_RUN
from tests.helpers.scripts import call_script
from tests.helpers.suggestions import after, applied, fill, one_line, overrides_in
from trainwell.callbacks.pruning import PRUNER_ATTR, PRUNING_FILE, TrialPruned, TrialPruning
from trainwell.cli import run_training
from trainwell.training.run import train

MEDIAN = {"_target_": "optuna.pruners.MedianPruner", "n_startup_trials": 1}


def _study(
    tmp_path: Path, direction: str, first: dict[int, float]
) -> tuple[optuna.Study, str, optuna.Trial]:
    """A study whose trial 0 completed after reporting `first`, and its running trial 1."""
    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="s", storage=storage, direction=direction)
    study.set_user_attr(PRUNER_ATTR, MEDIAN)
    done = study.ask()
    for step, value in first.items():
        done.report(value, step)
    study.tell(done, list(first.values())[-1])
    return study, storage, study.ask()


def _settings(storage: str) -> OmegaConf:
    return OmegaConf.create({"study": "s", "storage": storage, "trial": 1})


def test_a_trial_worse_than_the_median_at_a_step_is_pruned_there(tmp_path: Path) -> None:
    _, storage, _ = _study(tmp_path, "minimize", {0: 1.0, 1: 0.5})
    pruning = TrialPruning(_settings(storage), "val/loss", tmp_path)
    pruning.report(0, 0.9)  # better than trial 0 at step 0: goes on
    with pytest.raises(TrialPruned, match=r"trial 1 pruned at step 1: val/loss=2\.0"):
        pruning.report(1, 2.0)
    assert json.loads((tmp_path / PRUNING_FILE).read_text()) == {
        "values": {"0": 0.9, "1": 2.0},
        "pruned_at": 1,
    }


def test_a_cv_trial_is_pruned_after_the_fold_that_makes_it_hopeless(tmp_path: Path) -> None:
    _, storage, _ = _study(tmp_path, "maximize", {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0})
    run_dir = tmp_path / "trial"
    pruning = ["++pruning.study=s", f"++pruning.storage='{storage}'", "++pruning.trial=1"]
    cfg = compose_config([*CV_RUN, *pruning, "optimized_metric=cv/acc_mean"], run_dir)
    with pytest.raises(TrialPruned, match="trial 1 pruned at step 0: cv/acc_mean="):
        run_training(cfg)
    reported = json.loads((run_dir / PRUNING_FILE).read_text())
    assert reported["pruned_at"] == 0 and list(reported["values"]) == ["0"]
    acc = json.loads((run_dir / "fold_0" / "results.json").read_text())["metrics"]["val/acc_best"]
    assert reported["values"]["0"] == pytest.approx(acc, abs=1e-6)  # fold 0's accuracy
    assert not (run_dir / "fold_1").exists()  # the folds after it never trained


def test_the_sweeper_replays_the_reports_and_records_the_trial_as_pruned(tmp_path: Path) -> None:
    study, storage, trial = _study(tmp_path, "minimize", {0: 1.0})
    (tmp_path / PRUNING_FILE).write_text(json.dumps({"values": {"0": 3.0}, "pruned_at": 0}))
    search = OptunaSearch(None, "minimize", "s", storage, 2, 1, None, pruner=MEDIAN)
    assert search._replay(study, trial, tmp_path)
    frozen = optuna.load_study(study_name="s", storage=storage).trials[1]
    assert frozen.state == TrialState.PRUNED and frozen.intermediate_values == {0: 3.0}


def test_a_single_split_trial_is_pruned_after_the_validation_that_makes_it_hopeless(
    tmp_path: Path,
) -> None:
    _, storage, _ = _study(tmp_path, "minimize", {0: 0.0, 1: 0.0})
    run_dir = tmp_path / "trial"
    pruning = ["++pruning.study=s", f"++pruning.storage='{storage}'", "++pruning.trial=1"]
    quick = ["trainer.max_epochs=2", "trainer.limit_train_batches=2", "logger=[]"]
    cfg = compose_config([*QUIET_RUN, *quick, *pruning, "optimized_metric=val/loss"], run_dir)
    with pytest.raises(TrialPruned, match="trial 1 pruned at step 0: val/loss="):
        train(cfg)
    assert json.loads((run_dir / PRUNING_FILE).read_text())["pruned_at"] == 0
    assert not (run_dir / "results.json").exists()  # stopped before its second epoch


def test_a_trial_without_its_metric_runs_with_the_optimized_metric_the_refusal_names(
    tmp_path: Path,
) -> None:
    """A trial's pruning reports the metric the search optimizes: without one, the trial is
    refused before it trains, naming the override; with it, the trial reports that metric."""
    _, storage, _ = _study(tmp_path, "maximize", {0: 0.0})
    pruning = ["++pruning.study=s", f"++pruning.storage='{storage}'", "++pruning.trial=1"]
    argv = [*OWNED, *QUIET_RUN, "trainer.max_epochs=1", "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=1", "test=false", *pruning, f"hydra.run.dir={tmp_path}/t"]  # fmt: skip
    proc = call_script("train.py", *argv)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (named,) = overrides_in(after(one_line(proc), "needs"))
    assert not (tmp_path / "t" / "checkpoints").exists()
    proc = call_script("train.py", *applied(argv, fill(named, "val/acc")))
    assert proc.returncode == 0, proc.stderr[-2000:]
    reported = json.loads((tmp_path / "t" / PRUNING_FILE).read_text())
    assert reported["pruned_at"] is None and list(reported["values"]) == ["0"]
