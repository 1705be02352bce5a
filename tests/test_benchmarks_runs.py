"""The benchmarks of whole script runs, run small: start-up, resume position,
cross-validation, class imbalance and the doctor's time.

Each part runs in the test's process (tests/helpers/benchmarks.py), the scripts it times as a
user runs them; only facts are asserted, never speeds (tests/test_benchmarks.py says which).
"""

from __future__ import annotations

import pytest

from tests.helpers.benchmarks import run_part


@pytest.mark.slow
def test_startup_runs_and_csv_run_does_not_import_wandb() -> None:
    out = run_part(
        "features.py",
        "startup",
        "--epochs",
        "1",
        "--reps",
        "1",
        "--import-reps",
        "0",
        "--error-reps",
        "1",
    )
    assert float(out["startup_s"]) > 0 and float(out["training_s"]) > 0
    assert out["wandb_imported"] == "0"
    # the mistakes are answered, each in one line, before torch is imported
    assert float(out["bad_key_s"]) > 0 and float(out["missing_ckpt_s"]) > 0
    assert out["heavy_imported_on_error"] == "0"


@pytest.mark.slow
def test_resume_position_resumes_where_each_killed_run_stopped() -> None:
    out = run_part("features.py", "resume", "--samples", "640", "--reps", "1")
    # 20 batches per epoch: the runs resumed at 5% (step 1) and 95% (step 19) of it
    assert (out["batches_5pct"], out["batches_95pct"], out["epoch_batches"]) == ("1", "19", "20")
    assert float(out["resume_5pct_s"]) > 0 and float(out["resume_95pct_s"]) > 0


@pytest.mark.slow  # a minute of training: like every other benchmark run, in make test-slow
def test_imbalance_benchmark_reports_every_side() -> None:
    out = run_part("features.py", "imbalance", "--epochs", "1", "--in-process")
    for side in ("plain", "weighted_sampler", "class_weights"):
        for figure in ("acc", "balanced_acc", "worst_recall"):
            assert 0.0 <= float(out[f"{side}_{figure}"]) <= 1.0
        assert float(out[f"{side}_wall_s"]) > 0


@pytest.mark.slow
def test_doctor_time_runs_both_sides() -> None:
    # The probes at their smallest: the test is that both sides run, not what they find.
    small = ["overfit_steps", "overfit_max_steps", "scan_batches", "throughput_batches"]
    probes = [f"probe.{knob}=2" for knob in (*small, "memory_steps")]
    out = run_part("features.py", "doctor", "--baseline", "HEAD", "--reps", "1", *probes)
    assert set(out) == {"before_s", "after_s", "ratio"}
    assert 0 < float(out["before_s"]) < 600 and 0 < float(out["after_s"]) < 600


@pytest.mark.slow
def test_cv_overhead_runs_both_sides() -> None:
    out = run_part("features.py", "cv", "--folds", "2", "--reps", "1")
    assert out["folds"] == "2"
    assert float(out["cv_s"]) > 0 and float(out["runs_s"]) > 0
    assert float(out["probe_s"]) > 0 and float(out["oof_per_fold_s"]) > 0


@pytest.mark.slow
def test_summary_cost_plays_back_a_sweep_job_by_job() -> None:
    out = run_part("features.py", "summary", "--sizes", "4", "--reps", "1")
    assert set(out) == {"per_job_s_4", "max_s_4"}
    assert 0 < float(out["per_job_s_4"]) <= float(out["max_s_4"])


@pytest.mark.slow
def test_state_checkpoint_runs_every_side() -> None:
    out = run_part("features.py", "state", "--epochs", "1", "--reps", "1")
    assert {"default_s", "no_step0_s", "lists_s", "numpy_s", "step0_s", "step0_share"} <= set(out)
    assert 0 < float(out["step0_s"]) < float(out["default_s"])
    assert 0 < float(out["step0_share"]) < 1


@pytest.mark.slow
def test_state_checkpoint_measures_the_step0_check_on_a_large_model() -> None:
    out = run_part(
        "features.py",
        "state",
        "--no-runs",
        "--large-mparams",
        "4",
        "--array-mib",
        "8",
        "--reps",
        "1",
    )
    for stage in ("fresh", "resumed"):
        assert float(out[f"large_ckpt_mib_{stage}"]) > 20
        # Carrying the payloads costs about the checkpoint; the check without them, far less.
        assert float(out[f"large_payload_extra_share_{stage}"]) > 0.5
        assert float(out[f"large_extra_share_{stage}"]) < 0.25
