"""The summary of a multirun dir, on dirs laid out as a sweep leaves them (tests/helpers/sweeps.py):
groups, their figures, the jobs without results, the files, and scripts/summarize.py.

A real sweep through train.py is in tests/training/test_sweep_summary.py."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

from tests.helpers.scripts import call_script
from tests.helpers.suggestions import after, command_in, fill, key_of, overrides_in
from tests.helpers.sweeps import (
    LRS,
    OPTUNA_SWEEPER,
    SWEEP,
    TEST_ACC,
    VAL_ACC,
    seeds_and_lrs,
    write_job,
    write_multirun_yaml,
)
from trainwell.cli import JobFailed
from trainwell.summary.build import sweep_summary
from trainwell.summary.callback import SweepSummary
from trainwell.summary.jobs import FAILURE_FILE, NOT_FINISHED
from trainwell.summary.stats import describe
from trainwell.summary.write import update_summary


def _group(summary: dict, lr: str) -> dict:
    (group,) = [g for g in summary["groups"] if g["overrides"].get("model.optimizer.lr") == lr]
    return group


def test_seeds_are_pooled_and_each_group_has_n_mean_sample_std_min_max(tmp_path: Path) -> None:
    seeds_and_lrs(tmp_path)
    summary = sweep_summary(tmp_path)
    assert len(summary["groups"]) == 2
    for lr in LRS:
        group = _group(summary, lr)
        assert group["n"] == 3 and "seed" not in group["overrides"]
        for metric, values in (("test/acc", TEST_ACC[lr]), ("val/acc", VAL_ACC[lr])):
            stats = group["metrics"][metric]
            assert abs(stats["mean"] - statistics.mean(values)) <= 1e-12
            assert abs(stats["std"] - statistics.stdev(values)) <= 1e-12  # ddof=1
            assert (stats["min"], stats["max"], stats["n"]) == (min(values), max(values), 3)
    # Jobs are numbered seed-outermost, as Hydra numbers `seed=1,2,3 model.optimizer.lr=...`.
    assert _group(summary, "0.001")["jobs"] == ["0", "2", "4"]
    assert _group(summary, "0.003")["jobs"] == ["1", "3", "5"]
    assert summary["common"] == {"trainer.max_epochs": "2"}
    assert summary["jobs"] == {"done": 6, "failed": 0, "missing": 0}


def test_one_value_has_no_std_and_a_diverged_value_hides_no_figure() -> None:
    assert describe([0.5])["std"] is None and describe([0.5])["mean"] == 0.5
    assert describe([0.5, float("nan")]) == {
        "n": 2, "mean": None, "std": None, "min": None, "max": None,
    }  # fmt: skip


def test_summary_pool_names_the_keys_pooled_instead_of_the_seed(tmp_path: Path) -> None:
    seeds_and_lrs(tmp_path, extra=())
    write_multirun_yaml(tmp_path, SWEEP, summary={"pool": []})
    assert [g["n"] for g in sweep_summary(tmp_path)["groups"]] == [1] * 6
    write_multirun_yaml(tmp_path, SWEEP, summary={"pool": ["seed", "model.optimizer.lr"]})
    (group,) = sweep_summary(tmp_path)["groups"]
    assert group["n"] == 6 and group["overrides"] == {}


def test_rows_are_sorted_by_the_monitored_metric_in_its_mode(tmp_path: Path) -> None:
    seeds_and_lrs(tmp_path)
    best_first = [g["overrides"]["model.optimizer.lr"] for g in sweep_summary(tmp_path)["groups"]]
    assert best_first == ["0.003", "0.001"]  # val/acc, max
    write_multirun_yaml(tmp_path, [*SWEEP, "trainer.max_epochs=2"], monitor=("test/loss", "min"))
    summary = sweep_summary(tmp_path)
    assert summary["sort"] == {"metric": "test/loss", "mode": "min"}
    assert [g["overrides"]["model.optimizer.lr"] for g in summary["groups"]] == ["0.003", "0.001"]
    write_multirun_yaml(
        tmp_path, [*SWEEP, "trainer.max_epochs=2"], summary={"metric": "test/loss", "mode": "max"}
    )
    summary = sweep_summary(tmp_path)
    assert [g["overrides"]["model.optimizer.lr"] for g in summary["groups"]] == ["0.001", "0.003"]


def test_a_relaunch_with_resume_auto_is_the_same_sweep(tmp_path: Path) -> None:
    """A sweep relaunched with run_id=<its name> resume=auto: the jobs that ran again carry
    those overrides, the rest not; the groups are the same."""
    seeds_and_lrs(tmp_path / "first")
    want = sweep_summary(tmp_path / "first")
    relaunched = tmp_path / "relaunched"
    shutil.copytree(tmp_path / "first", relaunched)
    for job in ("3", "4", "5"):
        path = relaunched / job / ".hydra" / "overrides.yaml"
        path.write_text(path.read_text() + "- run_id=exp1\n- resume=auto\n")
    assert sweep_summary(relaunched) == want


def test_a_rebuilt_summary_says_what_the_files_say_now(tmp_path: Path) -> None:
    """The summary written while job 5 ran, then after it ended: the same as one built fresh."""
    jobs = seeds_and_lrs(tmp_path / "done", extra=())
    partial = tmp_path / "partial"
    shutil.copytree(tmp_path / "done", partial)
    (partial / "5" / "results.json").unlink()
    update_summary(partial)
    running = json.loads((partial / "summary.json").read_text())
    assert running["failed"] == [
        {"job": "5", "overrides": ["seed=3", "model.optimizer.lr=0.003"], "cause": NOT_FINISHED}
    ]
    assert _group(running, "0.003")["n"] == 2 and _group(running, "0.003")["not_done"] == ["5"]
    assert not (partial / "summary.png").exists()  # drawn once no job is outstanding
    shutil.copy(jobs[5] / "results.json", partial / "5" / "results.json")
    update_summary(partial)
    assert json.loads((partial / "summary.json").read_text()) == sweep_summary(tmp_path / "done")
    assert (partial / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_jobs_without_results_are_listed_with_their_one_line_cause(tmp_path: Path) -> None:
    seeds_and_lrs(tmp_path)
    (tmp_path / "1" / "results.json").unlink()
    (tmp_path / "1" / FAILURE_FILE).write_text("optimizer lr must be positive\n")
    (tmp_path / "2" / "results.json").unlink()
    (tmp_path / "2" / "error.log").write_text("Traceback ...\nRuntimeError: CUDA out of memory\n")
    summary = sweep_summary(tmp_path)
    causes = {j["job"]: j["cause"] for j in summary["failed"]}
    assert causes == {
        "1": "optimizer lr must be positive",
        "2": "RuntimeError: CUDA out of memory (traceback: 2/error.log)",
    }
    assert summary["jobs"] == {"done": 4, "failed": 2, "missing": 0}
    assert _group(summary, "0.003")["n"] == 2 and _group(summary, "0.003")["not_done"] == ["1"]


def test_summarize_names_a_removed_job_and_its_group_has_n_2(tmp_path: Path) -> None:
    seeds_and_lrs(tmp_path)
    shutil.rmtree(tmp_path / "3")
    proc = call_script("summarize.py", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    group = _group(summary, "0.003")
    values = [TEST_ACC["0.003"][0], TEST_ACC["0.003"][2]]
    assert group["n"] == 2 and group["jobs"] == ["1", "5"] and group["not_done"] == ["3"]
    assert abs(group["metrics"]["test/acc"]["mean"] - statistics.mean(values)) <= 1e-12
    assert summary["missing"] == [
        {
            "job": "3",
            "overrides": ["seed=2", "model.optimizer.lr=0.003", "trainer.max_epochs=2"],
            "cause": "not there: the sweep's overrides give this job and no job dir holds it",
        }
    ]
    assert "missing: job 3 (seed=2 model.optimizer.lr=0.003 trainer.max_epochs=2)" in proc.stdout
    assert f"summary: {tmp_path / 'summary.md'}" in proc.stdout


def test_summarize_rebuilds_a_dir_of_array_jobs_without_multirun_yaml(tmp_path: Path) -> None:
    """SLURM array tasks (`sbatch --array`), each a plain run with its own overrides: the
    settings come from a job's own config."""
    seeds_and_lrs(tmp_path)
    cfg = OmegaConf.load(tmp_path / "multirun.yaml")
    (tmp_path / "multirun.yaml").unlink()
    for job in tmp_path.glob("*/.hydra"):
        OmegaConf.save({k: v for k, v in cfg.items() if k != "hydra"}, job / "config.yaml")
    proc = call_script("summarize.py", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [g["n"] for g in summary["groups"]] == [3, 3] and summary["missing"] == []


def test_summarize_refuses_what_is_not_a_multirun_dir_in_one_line(tmp_path: Path) -> None:
    proc = call_script("summarize.py", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "holds no jobs" in proc.stderr
    (tmp_path / "results.json").write_text(json.dumps({"metrics": {"test/acc": 0.9}}))
    proc = call_script("summarize.py", str(tmp_path))
    assert proc.returncode == 2 and "is one run" in proc.stderr, proc.stderr
    (tmp_path / "results.json").unlink()
    seeds_and_lrs(tmp_path)
    proc = call_script("summarize.py", str(tmp_path), "seed=1")
    assert proc.returncode == 2 and "summary.pool" in proc.stderr, proc.stderr
    # What it takes, as it says: summary.pool=[...] pools the keys named in its place.
    takes = overrides_in(after(proc.stderr.strip(), "summarize.py takes"))
    assert [key_of(o) for o in takes] == ["summary.pool", "summary.metric", "summary.mode"]
    pool = takes[0].replace("[...]", "[seed,model.optimizer.lr]")
    proc = call_script("summarize.py", str(tmp_path), pool)
    assert proc.returncode == 0, proc.stderr
    assert [g["n"] for g in json.loads((tmp_path / "summary.json").read_text())["groups"]] == [6]


def test_summarize_without_a_dir_prints_its_usage_and_runs_as_it_shows(tmp_path: Path) -> None:
    seeds_and_lrs(tmp_path)
    proc = call_script("summarize.py")
    assert proc.returncode == 2, proc.stderr
    usage = command_in(proc.stderr, "python scripts/summarize.py")
    assert usage[1:] == ["scripts/summarize.py", "<multirun dir>"], proc.stderr
    options = overrides_in(proc.stderr)
    assert [key_of(o) for o in options] == ["summary.pool", "summary.metric"], proc.stderr
    metric = fill(options[1], "val/acc")
    proc = call_script("summarize.py", fill(usage[2], tmp_path), metric)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["sort"]["metric"] == "val/acc"


def test_a_plot_pending_on_running_jobs_is_drawn_by_the_command_summary_md_names(
    tmp_path: Path,
) -> None:
    jobs = seeds_and_lrs(tmp_path / "done", extra=())
    partial = tmp_path / "partial"
    shutil.copytree(tmp_path / "done", partial)
    (partial / "5" / "results.json").unlink()
    update_summary(partial)
    assert not (partial / "summary.png").exists()
    said = (partial / "summary.md").read_text()
    command = command_in(said, "python scripts/summarize.py")
    shutil.copy(jobs[5] / "results.json", partial / "5" / "results.json")  # every job ended
    proc = call_script("summarize.py", *[fill(a, partial) if "<" in a else a for a in command[2:]])
    assert proc.returncode == 0, proc.stderr
    assert (partial / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_md_has_the_table_best_first_its_latex_twin_and_the_plot(tmp_path: Path) -> None:
    seeds_and_lrs(tmp_path)
    update_summary(tmp_path, final=True)
    text = (tmp_path / "summary.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0] == "| model.optimizer.lr | n | val/acc | test/acc | test/loss |"
    best = _group(sweep_summary(tmp_path), "0.003")["metrics"]["test/acc"]
    assert table[2].startswith("| 0.003 | 3 | ")
    assert f"{best['mean']:.4f} ± {best['std']:.4f}" in table[2]
    assert table[3].startswith("| 0.001 | 3 | ")
    latex = text[text.index("\\begin{tabular}") : text.index("\\end{tabular}")]
    rows = [line for line in latex.splitlines() if line.endswith("\\\\")]
    assert rows[1].startswith("0.003 & 3 & ") and f"${best['mean']:.4f} \\pm" in rows[1]
    assert rows[2].startswith("0.001 & 3 & ")
    assert "![val/acc per group](summary.png)" in text
    assert (tmp_path / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_study_has_its_best_trial_and_pruned_count(tmp_path: Path) -> None:
    write_multirun_yaml(
        tmp_path,
        ["hparams_search=digits_optuna"],
        sweeper=OPTUNA_SWEEPER,
        optimized_metric="val/loss",
        direction="minimize",
    )
    losses = {"0": 0.30, "1": 0.12, "2": None, "3": 0.12, "4": None}
    for name, loss in losses.items():
        metrics = None if loss is None else {"val/loss": loss, "val/acc": 1.0 - loss}
        write_job(
            tmp_path, name, [f"model.optimizer.lr=0.0{name}1", "++pruning.trial=" + name], metrics
        )
    (tmp_path / "2" / "pruning.json").write_text(json.dumps({"values": {}, "pruned_at": 3}))
    (tmp_path / "4" / FAILURE_FILE).write_text("val/loss is nan\n")
    summary = sweep_summary(tmp_path)
    assert summary["kind"] == "study" and summary["sort"] == {"metric": "val/loss", "mode": "min"}
    study = summary["study"]
    assert study["best_trial"] == {
        "job": "1", "value": 0.12, "overrides": ["model.optimizer.lr=0.011"],
    }  # fmt: skip
    assert study["trials"] == {"complete": 3, "failed": 1, "pruned": 1}
    assert summary["groups"][0]["jobs"] == ["1"] and summary["groups"][1]["jobs"] == ["3"]
    assert {j["job"]: j["cause"] for j in summary["failed"]} == {
        "2": "pruned at step 3",
        "4": "val/loss is nan",
    }


def _job_config(sweep: Path, job: str) -> object:
    return OmegaConf.create(
        {
            "hydra": {
                "mode": RunMode.MULTIRUN,
                "sweep": {"dir": str(sweep)},
                "runtime": {"output_dir": str(sweep / job)},
            }
        }
    )


def test_each_jobs_end_updates_the_summary_and_records_why_it_failed(tmp_path: Path) -> None:
    seeds_and_lrs(tmp_path)
    (tmp_path / "4" / "results.json").unlink()
    callback = SweepSummary()
    failed = JobReturn(status=JobStatus.FAILED)
    failed.return_value = JobFailed(f"{tmp_path / '4'}: lr must be positive")
    callback.on_job_end(config=_job_config(tmp_path, "4"), job_return=failed)
    assert (tmp_path / "4" / FAILURE_FILE).read_text() == "lr must be positive\n"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failed"][0]["job"] == "4" and summary["failed"][0]["cause"] == (
        "lr must be positive"
    )
    # Started again (a relaunch), the job is judged by this attempt, not by the last one's end.
    callback.on_job_start(config=_job_config(tmp_path, "4"), task_function=print)
    assert not (tmp_path / "4" / FAILURE_FILE).exists()


def test_a_search_trial_that_failed_into_a_return_value_is_recorded(tmp_path: Path) -> None:
    """The Optuna sweeper's launcher gets TrialFailed back instead of the exception."""
    from hydra_plugins.trainwell_optuna_sweeper._failures import TrialFailed

    seeds_and_lrs(tmp_path)
    (tmp_path / "4" / "results.json").unlink()
    ended = JobReturn(status=JobStatus.COMPLETED)
    ended.return_value = TrialFailed(f"{tmp_path / '4'}: trial 4 pruned at step 2: val/loss=0.9")
    SweepSummary().on_job_end(config=_job_config(tmp_path, "4"), job_return=ended)
    assert (tmp_path / "4" / FAILURE_FILE).read_text() == "trial 4 pruned at step 2: val/loss=0.9\n"


def test_a_summary_that_cannot_be_built_warns_in_one_line_and_the_job_stands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds_and_lrs(tmp_path)
    (tmp_path / "2" / ".hydra" / "overrides.yaml").write_text("- [unclosed\n")
    ended = JobReturn(status=JobStatus.COMPLETED)
    ended.return_value = 0.5
    SweepSummary().on_job_end(config=_job_config(tmp_path, "4"), job_return=ended)
    err = capsys.readouterr().err
    assert err.startswith("warning: sweep summary not updated (") and err.count("\n") == 1
    assert f"python scripts/summarize.py {tmp_path} rebuilds it" in err
    # The printed command, run before the cause is fixed: the same cause in one line, no
    # traceback; once it is fixed (the job's file written again), it rebuilds the summary.
    _, script, *args = command_in(err, "python scripts/summarize.py")
    assert script == "scripts/summarize.py" and args == [str(tmp_path)]
    proc = call_script("summarize.py", *args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        proc.stderr
        == f"error: {tmp_path / '2' / '.hydra' / 'overrides.yaml'} is not readable YAML at line 2: while parsing a flow sequence\n"
    )
    (tmp_path / "2" / ".hydra" / "overrides.yaml").write_text(
        "- seed=1\n- model.optimizer.lr=0.003\n- trainer.max_epochs=2\n"
    )
    proc = call_script("summarize.py", *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "summary.json").read_text())["jobs"]["done"] == 6


@pytest.mark.parametrize("value", [0.5, {"metrics": 1}])
def test_a_job_that_ended_well_leaves_no_failure(tmp_path: Path, value: object) -> None:
    seeds_and_lrs(tmp_path)
    ended = JobReturn(status=JobStatus.COMPLETED)
    ended.return_value = value
    SweepSummary().on_job_end(config=_job_config(tmp_path, "4"), job_return=ended)
    assert not (tmp_path / "4" / FAILURE_FILE).exists()
    assert json.loads((tmp_path / "summary.json").read_text())["jobs"]["done"] == 6
