"""hparams_search=<name>_optuna: the configs, the search-space syntax, the metric train.py returns,
and real sweeps (scripts/train.py -m in a subprocess) read back through Optuna's storage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.plugins import Plugins
from omegaconf import DictConfig
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from hydra_plugins.trainwell_optuna_sweeper import _space
from tests.helpers.config import CONF, REPO
from tests.helpers.scripts import call_script, run_script
from tests.helpers.search import BRUTE_FORCE, TINY
from tests.helpers.suggestions import after, applied, command_in, fill, one_line, overrides_in
from tests.helpers.wandb_records import last_logged, offline_runs, read_offline_run
from trainwell.cli import optimized_value
from trainwell.errors import TrainwellError


def _hydra_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=True)


def _composes_into_a_study(search: str, metric: str, direction: str) -> tuple[DictConfig, dict]:
    cfg = _hydra_cfg(f"hparams_search={search}")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_ in Plugins.instance().class_name_to_class  # Hydra found the plugin
    assert cfg.optimized_metric == metric and sweeper.direction == direction
    assert cfg.run_id == search and sweeper.study_name == search
    # Resolvable when a multirun starts (before Hydra sets up any job), the run_id naming it.
    sweep_dir = Path.cwd() / "logs" / cfg.task_name / "multiruns" / search
    assert cfg.hydra.sweep.dir == str(sweep_dir)
    assert sweeper.storage == f"sqlite:///{sweep_dir}/optuna.db"
    assert sweeper.sampler._target_ == "optuna.samplers.TPESampler" and sweeper.sampler.seed == 1234
    space, fixed = _space.parse([f"{k}={v}" for k, v in sweeper.params.items()])
    assert set(space) == set(sweeper.params) and not fixed
    return cfg, space


def test_search_configs_compose_into_an_optuna_study_under_the_sweep_dir() -> None:
    _composes_into_a_study("digits_optuna", "val/loss", "minimize")


@pytest.mark.example("project.data.cifar10", "project.data.synthetic", "project.models.resnet")
def test_the_resnet_search_selects_its_experiment_and_searches_accumulation() -> None:
    search = "resnet_accum_optuna"
    cfg, space = _composes_into_a_study(search, "val/acc_best", "maximize")
    assert cfg.task_name == "resnet_accum" and cfg.model.net._target_.endswith("ResNet18")
    assert space["trainer.accumulate_grad_batches"] == CategoricalDistribution([1, 2, 4])
    on_synthetic = _hydra_cfg(f"hparams_search={search}", "data=synthetic")
    assert on_synthetic.data._target_.endswith("SyntheticDataModule")


def test_search_space_syntax() -> None:
    space, fixed = _space.parse(
        [
            "a=choice(1, 2, x)",
            "b=range(2, 10, 2)",  # Hydra's range excludes its stop: 2, 4, 6, 8
            "c=interval(0.1, 0.5)",
            "d=tag(log, interval(0.0001, 0.1))",
            "e=int(interval(1, 5))",  # a cast makes an interval integer
            "f=3",
            "model/optimizer=choice(adamw, sgd)",
            "a=choice(7, 8)",  # a later argument (the command line) replaces the config's
        ]
    )
    assert space == {
        "a": CategoricalDistribution([7, 8]),
        "b": IntDistribution(2, 8, step=2),
        "c": FloatDistribution(0.1, 0.5),
        "d": FloatDistribution(0.0001, 0.1, log=True),
        "e": IntDistribution(1, 5),
        "model/optimizer": CategoricalDistribution(["adamw", "sgd"]),
    }
    assert fixed == {"f": "3"}
    assert _space.as_override("name", "a b") == "name=a\\ b"


def test_optimized_value_is_the_named_metric_or_a_one_line_error() -> None:
    results = {"metrics": {"val/loss": 0.25, "val/acc": 0.9}}
    assert optimized_value(results, "val/loss") == 0.25
    with pytest.raises(TrainwellError, match=r"^optimized_metric=val/acc_best is not a metric of "):
        optimized_value(results, "val/acc_best")
    with pytest.raises(TrainwellError, match=r"\(available: val/acc, val/loss\)$"):
        optimized_value(results, "val/acc_best")


def test_a_search_without_multirun_is_refused_before_training(tmp_path: Path) -> None:
    # A real subprocess: the mutation run's smoke check proves with it that scripts a test starts
    # import the mutated copy.
    proc = run_script("train.py", "hparams_search=digits_optuna", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: hparams_search=digits_optuna is an Optuna search: start it with -m "
        "(python scripts/train.py -m hparams_search=digits_optuna ...)"
    )
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.slow  # a search of one trial
def test_a_search_started_without_multirun_runs_as_the_printed_command(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    rest = [f"hydra.sweep.dir={sweep_dir}", *TINY, "trainer.limit_test_batches=1"]
    rest.append("hydra.sweeper.n_trials=1")
    proc = call_script("train.py", "hparams_search=digits_optuna", *rest)
    command = command_in(one_line(proc), "python")
    # python scripts/train.py -m hparams_search=digits_optuna ... (the rest of the command line)
    assert command[1] == "scripts/train.py" and (REPO / command[1]).is_file(), command
    proc = call_script(Path(command[1]).name, *command[2:], *rest)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [t.state for t in _study(sweep_dir).trials] == [TrialState.COMPLETE]


# -- real sweeps -----------------------------------------------------------------------------


def _sweep_cmd(sweep_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "-m",
        "hparams_search=digits_optuna",
        f"hydra.sweep.dir={sweep_dir}",
        *TINY,
        *overrides,
    ]


def _sweep(sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return run_script(
        "train.py",
        "-m",
        "hparams_search=digits_optuna",
        f"hydra.sweep.dir={sweep_dir}",
        *TINY,
        *overrides,
        timeout=900,
    )


def _study(sweep_dir: Path) -> optuna.Study:
    return optuna.load_study(study_name="digits_optuna", storage=f"sqlite:///{sweep_dir}/optuna.db")


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def test_a_maximized_sweep_of_another_metric_picks_the_largest(tmp_path: Path) -> None:
    # Two completed trials whose train/loss differ (two steps at lr 1e-4 barely move it; at 0.03
    # they do), maximized: the best trial is the one with the larger train/loss, and the value
    # Optuna holds for each trial is its own train/loss, not the config's val/loss.
    sweep_dir = tmp_path / "sweep"
    proc = call_script(
        "train.py",
        "-m",
        "hparams_search=digits_optuna",
        f"hydra.sweep.dir={sweep_dir}",
        *TINY,
        "trainer.limit_test_batches=1",
        *BRUTE_FORCE,
        "hydra.sweeper.n_trials=2",
        "model.optimizer.lr=choice(0.0001,0.03)",
        "optimized_metric=train/loss",
        "hydra.sweeper.direction=maximize",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = _study(sweep_dir).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    values = {t.number: t.value for t in trials}
    for number, value in values.items():
        assert value == _results(sweep_dir / str(number))["metrics"]["train/loss"]
    assert values[0] != values[1]
    best = max(values, key=values.__getitem__)
    assert _study(sweep_dir).best_trial.number == best
    summary = (sweep_dir / "optimization_results.yaml").read_text()
    assert f"best_trial: {best}\n" in summary and "direction: maximize\n" in summary
    assert f"best trial {best}: train/loss={values[best]} with " in proc.stdout
    # The sweep summary (summary.json, built from the trials' files) names the same best trial.
    study = json.loads((sweep_dir / "summary.json").read_text())
    assert study["kind"] == "study" and study["sort"] == {"metric": "train/loss", "mode": "max"}
    assert study["study"]["best_trial"]["job"] == str(best)
    assert study["study"]["best_trial"]["value"] == values[best]
    assert study["study"]["trials"] == {"complete": 2, "failed": 0, "pruned": 0}
    assert [g["jobs"] for g in study["groups"]] == [[str(best)], [str(1 - best)]]


@pytest.mark.slow
def test_failed_trial_is_recorded_and_the_sweep_goes_on_to_print_the_best(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    proc = _sweep(
        sweep_dir, *BRUTE_FORCE, "hydra.sweeper.n_trials=5", "model.net.dropout=choice(0.1,1.5)"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = {t.number: t for t in _study(sweep_dir).trials}
    assert sorted(trials) == [0, 1]  # the space has 2 points: the sampler says so, no repeats
    failed = [t for t in trials.values() if t.state == TrialState.FAIL]
    complete = [t for t in trials.values() if t.state == TrialState.COMPLETE]
    assert len(failed) == 1 and len(complete) == 1
    assert failed[0].params == {"model.net.dropout": 1.5}
    assert (
        "ValueError: dropout probability has to be between 0 and 1"
        in failed[0].user_attrs["failure"]
    )
    failure_dir = sweep_dir / str(failed[0].number)
    assert (failure_dir / "error.log").is_file()
    best = complete[0]
    best_dir = sweep_dir / str(best.number)
    # The value Optuna holds is what the job returned: the run's own val/loss.
    assert best.value == _results(best_dir)["metrics"]["val/loss"]
    assert best.user_attrs["run_dir"] == str(best_dir)
    assert f"trial {failed[0].number} failed: " in proc.stdout
    assert f"best trial {best.number}: val/loss={best.value} with model.net.dropout=0.1" in (
        proc.stdout
    )
    summary = (sweep_dir / "optimization_results.yaml").read_text()
    assert f"best_trial: {best.number}\n" in summary and f"best_value: {best.value}\n" in summary
    (failure,) = json.loads((sweep_dir / "summary.json").read_text())["failed"]
    assert failure["job"] == str(failed[0].number)
    assert failure["cause"] == failed[0].user_attrs["failure"].removeprefix(f"{failure_dir}: ")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["hydra.sweeper.n_trials=1", "model.net.dropout=choice(1.5)"],
            "completed; first failure: ",
        ),
        (
            [
                "hydra.sweeper.n_trials=1",
                "optimized_metric=null",
                "model.optimizer.lr=choice(0.003)",
            ],
            "trial 0 returned dict, not a number to optimize: set optimized_metric=",
        ),
    ],
)
def test_a_sweep_without_a_result_exits_1_naming_the_cause(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    proc = _sweep(tmp_path / "sweep", *BRUTE_FORCE, *overrides)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert message in lines[-2], proc.stderr[-2000:]
    assert lines[-1].startswith("Set the environment variable HYDRA_FULL_ERROR=1")  # Hydra's hint
    assert "Traceback" not in proc.stderr
    if "set optimized_metric=" in message:  # the override named, the same sweep gives a result
        (named,) = overrides_in(after(lines[-2], "not a number to optimize: set"))
        sweep = _sweep(
            tmp_path / "again", *BRUTE_FORCE, *applied(overrides, fill(named, "val/loss"))
        )
        assert sweep.returncode == 0, sweep.stderr[-3000:]


@pytest.mark.slow
def test_a_killed_sweep_continues_where_it_stopped(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with (tmp_path / "first.log").open("w") as log:
        first = subprocess.Popen(
            _sweep_cmd(sweep_dir, "hydra.sweeper.n_trials=4", "trainer.max_epochs=3"),
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 600
            while not (sweep_dir / "2").is_dir():  # trials 0 and 1 told, trial 2 launched
                assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "trial 2 never started"
                time.sleep(0.05)
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    before = _study(sweep_dir).trials
    complete = [t.number for t in before if t.state == TrialState.COMPLETE]
    running = [t.number for t in before if t.state == TrialState.RUNNING]
    assert complete == [0, 1] and len(before) == len(complete) + len(running)

    again = _sweep(sweep_dir, "hydra.sweeper.n_trials=4", "trainer.max_epochs=3")
    assert again.returncode == 0, again.stderr[-3000:]
    interrupted = f", {len(running)} interrupted (marked failed)" if running else ""
    assert f": 2 of 4 trials done{interrupted}\n" in again.stdout
    study = _study(sweep_dir)
    after = {t.number: t.state for t in study.trials}
    # 2 done before + 2 run now = 4 complete; the interrupted one is failed and not counted.
    new = list(range(len(before), len(before) + 2))
    assert after == {
        **{n: TrialState.COMPLETE for n in [*complete, *new]},
        **{n: TrialState.FAIL for n in running},
    }
    assert study.user_attrs.get("interrupted_trials", []) == running
    # The relaunch searched on: its (random start-up) suggestions are not the first launch's again.
    earlier = [t.params for t in before]
    assert all(study.trials[n].params not in earlier for n in new)
    for number in [*complete, *new]:  # trial N trained in <sweep dir>/N, once
        assert _results(sweep_dir / str(number))["finished_at"]["epoch"] == 3
    assert "4 trials (4 complete, 0 failed)" in again.stdout


@pytest.mark.slow
def test_sweep_of_ddp_trials_logs_one_wandb_run_per_trial_grouped_by_sweep(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "search1"
    proc = _sweep(sweep_dir, "hydra.sweeper.n_trials=2", "trainer=ddp_sim", "logger=wandb")
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = _study(sweep_dir).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    # Rank 1 of each trial ran that trial in its dir (Lightning names its log after the process),
    # and started no sweep of its own: the sweep dir holds the two trials and nothing else.
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1"]
    assert proc.stdout.count("training plan:") == 2  # two trials, not a sweep per rank
    for trial in trials:
        run_dir = sweep_dir / str(trial.number)
        assert (run_dir / "train_ddp_process_1.log").is_file()
        assert _results(run_dir)["plan"]["world_size"] == 2
        (run_file,) = offline_runs(run_dir)
        run = read_offline_run(run_file)
        assert (run.run_id, run.group, run.name) == (
            f"train-search1-{trial.number}",
            "search1",
            f"train-{trial.number}",
        )
        assert run.exit_code == 0
        assert last_logged(run, "val/loss") == pytest.approx(trial.value, abs=1e-6)


@pytest.mark.example("project.data.cifar10", "project.data.synthetic", "project.models.resnet")
@pytest.mark.slow
def test_resnet_accum_search_runs_a_trial_at_its_scaled_lr(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    proc = run_script(
        "train.py",
        "-m",
        "hparams_search=resnet_accum_optuna",
        f"hydra.sweep.dir={sweep_dir}",
        "hydra.sweeper.n_trials=1",
        "data=synthetic",  # CIFAR-shaped, no download
        "data.num_samples=96",
        "data.num_val=32",
        "data.num_test=32",
        "data.batch_size=16",
        "model.net.width=8",
        "trainer.max_epochs=1",
        "print_config=false",
        "callbacks.rich_progress_bar=null",
        "callbacks.rich_model_summary=null",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(
        study_name="resnet_accum_optuna", storage=f"sqlite:///{sweep_dir}/optuna.db"
    )
    (trial,) = study.trials
    results = _results(sweep_dir / "0")
    assert trial.value == results["metrics"]["val/acc_best"]
    plan = results["plan"]
    accumulate = trial.params["trainer.accumulate_grad_batches"]
    assert plan["accumulate"] == accumulate and plan["effective_batch"] == 16 * accumulate
    # The searched LR is per 256 samples; the trial trained at it scaled to its effective batch.
    base = trial.params["model.optimizer.lr"]
    assert plan["lr"] == pytest.approx(base * 16 * accumulate / 256, rel=1e-12)


@pytest.mark.slow
def test_a_second_sweep_on_a_running_study_is_refused(tmp_path: Path) -> None:
    import fcntl

    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    with (sweep_dir / ".sweep.lock").open("w") as held:  # as a running sweep holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242")
        held.flush()
        proc = _sweep(sweep_dir, "hydra.sweeper.n_trials=1")
    assert proc.returncode == 1
    assert f"another sweep (pid 4242) is running in {sweep_dir}; wait for it" in proc.stderr
    assert not (sweep_dir / "optuna.db").exists() and not (sweep_dir / "0").exists()


@pytest.mark.slow
def test_pruned_trials_are_recorded_as_pruned_and_not_rerun(tmp_path: Path) -> None:
    # lr 0.03 first (seeded brute force), then two that barely move: the median pruner stops
    # them after a validation, and the relaunched search finds every trial done.
    sweep_dir = tmp_path / "sweep"
    search = [
        *BRUTE_FORCE,
        "hydra.sweeper.n_trials=3",
        "trainer.max_epochs=3",
        "model.optimizer.lr=choice(0.03,0.00001,0.00002)",
        "+hydra.sweeper.pruner={_target_:optuna.pruners.MedianPruner,n_startup_trials:1}",
    ]
    proc = _sweep(sweep_dir, *search)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = _study(sweep_dir).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED, TrialState.PRUNED]
    for t in trials[1:]:
        pruned_at = json.loads((sweep_dir / str(t.number) / "pruning.json").read_text())
        assert t.last_step == pruned_at["pruned_at"] < 2  # stopped before its last epoch
        assert not (sweep_dir / str(t.number) / "results.json").exists()
    assert "3 trials (1 complete, 0 failed, 2 pruned)" in proc.stdout
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["study"]["trials"] == {"complete": 1, "failed": 0, "pruned": 2}
    assert [j["job"] for j in summary["failed"]] == ["1", "2"]
    assert all(j["cause"].startswith(f"trial {j['job']} pruned at step") for j in summary["failed"])
    # A pruned trial is reported as stopped, never as an error.
    assert "stopped: trial 1 pruned at step" in proc.stderr and "error:" not in proc.stderr
    again = _sweep(sweep_dir, *search)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "3 of 3 trials done" in again.stdout and "pruned at step" not in again.stdout
    assert len(_study(sweep_dir).trials) == 3
