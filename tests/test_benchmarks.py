"""The benchmarks run and end with their machine-readable `key=value` line.

Each script is run as a user runs it (`python benchmarks/<x>.py`, tiny settings) in a subprocess;
the figures they print are checked only where the figure is a fact rather than a speed: trainwell
and the hand-written loop agree to 1e-5, checkpointing lowers activation memory, wandb is not
imported by a logger=csv run. Speeds depend on the machine and are never asserted.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))  # benchmarks/ is a folder of scripts, not a package

import gpu_throughput  # noqa: E402
import guard_overhead  # noqa: E402
import harness  # noqa: E402
import raw_loop  # noqa: E402


def run_benchmark(script: str, *args: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    pairs = dict(part.split("=", 1) for part in last.split())
    assert pairs, last
    return pairs


def test_final_line_is_key_value_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    harness.final_line(ratio=1.01834, name="digits", count=3)
    assert capsys.readouterr().out == "ratio=1.018 name=digits count=3\n"


def test_summary_median_and_spread() -> None:
    s = harness.summary([1.0, 3.0, 2.0])
    assert (s["median"], s["min"], s["max"]) == (2.0, 1.0, 3.0)
    assert s["spread"] == pytest.approx(0.5)  # half-range / median


@pytest.mark.parametrize(
    ("samples", "batch", "accumulate"), [(100, 8, 4), (96, 8, 4), (10, 3, 1), (7, 8, 2)]
)
def test_raw_loop_windows_match_trainwell_arithmetic(
    samples: int, batch: int, accumulate: int
) -> None:
    """The raw loop's exact accumulation uses the same window sizes as trainwell's."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(samples)), batch_size=batch)
    sizes = [len(b[0]) for b in loader]
    expected = [sum(sizes[i : i + accumulate]) for i in range(0, len(sizes), accumulate)]
    assert raw_loop.window_sizes(loader, accumulate) == expected
    assert sum(expected) == samples


def test_bf16_peak_lookup_prefers_the_specific_name() -> None:
    assert gpu_throughput.bf16_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_throughput.bf16_peak("NVIDIA H100 PCIe") == 756e12
    assert gpu_throughput.bf16_peak("NVIDIA H200") == 989e12
    assert gpu_throughput.bf16_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_throughput.bf16_peak("Some Future GPU") is None


def test_fixed_costs_are_the_epoch_minus_its_batches() -> None:
    run = {
        "epoch_seconds": [9.0, 2.0, 2.2],
        "train_seconds": [8.0, 1.5, 1.6],
        "val_seconds": [0.5, 0.3, 0.4],
        "val_setup_seconds": [0.2, 0.1, 0.1],
        "ckpt_seconds": [0.3, 0.1, 0.2],
    }
    costs = harness.fixed_costs(run)  # steady state: epochs 1 and 2 (the first is warm-up)
    assert costs["fixed_ms"] == pytest.approx(1000 * statistics.median([0.3, 0.3]))
    assert costs["ckpt_ms"] == pytest.approx(150.0)
    assert costs["val_setup_ms"] == pytest.approx(100.0)


@pytest.mark.parametrize("mode", ["background", "sync"])
def test_raw_loop_checkpoints_last_every_epoch_and_best_on_improvement(
    tmp_path: Path, mode: str
) -> None:
    import torch

    saver = raw_loop.EpochCheckpoints(tmp_path, mode)
    weights = torch.zeros(3)
    for epoch, acc in enumerate([0.5, 0.7, 0.6]):
        weights.fill_(epoch)
        saver.save({"epoch": epoch, "state_dict": {"w": weights}}, acc)
        weights.fill_(-1)  # the next step changes the weights in place
    saver.close()
    last = torch.load(tmp_path / "last.ckpt", weights_only=True)
    best = torch.load(tmp_path / "best.ckpt", weights_only=True)
    assert last["epoch"] == 2 and torch.equal(last["state_dict"]["w"], torch.full((3,), 2.0))
    assert best["epoch"] == 1 and torch.equal(best["state_dict"]["w"], torch.full((3,), 1.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "last.ckpt"]


def test_throughput_modes_share_the_data_path_and_layout() -> None:
    args = gpu_throughput.parser(False).parse_args([])
    base = gpu_throughput.base_overrides(args, cuda=False)
    assert "data.on_device=true" in base and "data.augment=true" in base
    for mode, (overrides, model_cl, _) in gpu_throughput.MODES.items():
        data_cl = "data.channels_last=true" in overrides
        assert data_cl == model_cl, mode  # NHWC batches exactly when the model is NHWC


@pytest.mark.slow
def test_overhead_runs_and_both_loops_agree() -> None:
    out = run_benchmark("overhead.py", "--workload", "digits", "--epochs", "2", "--reps", "1")
    assert float(out["digits_ratio"]) > 0 and float(out["digits_cpu_ratio"]) > 0
    # Same init, data order, optimizer, schedule: the final losses and weights agree.
    assert float(out["digits_maxdiff"]) <= 1e-5
    # Both sides checkpoint every epoch: each spends time in it, and it is printed in ms.
    assert float(out["digits_tw_ckpt_ms"]) > 0 and float(out["digits_raw_ckpt_ms"]) > 0
    assert float(out["digits_tw_fixed_ms"]) > 0


@pytest.mark.slow
def test_gpu_throughput_runs_on_cpu() -> None:
    out = run_benchmark(
        "gpu_throughput.py",
        *("--num-samples", "48", "--num-val", "16", "--batch", "16", "--width", "4"),
        *("--modes", "fp32", "--epochs", "2"),
    )
    assert out["best_mode"] == "fp32"
    assert float(out["fp32_tw_img_s"]) > 0 and float(out["fp32_raw_img_s"]) > 0
    if out["device"] == "cpu":
        assert math.isnan(float(out["fp32_mfu"]))  # no GPU peak to divide by


@pytest.mark.slow
def test_gpu_suite_runs_on_cpu_and_writes_its_json(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "gpu_suite.py"), "--smoke", "--out", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "OUT": ""},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    items = json.loads((tmp_path / "gpu_suite.json").read_text())["items"]
    assert "error" not in json.dumps(items), items
    fp32 = items["throughput"]["modes"]["fp32"]["median"]
    assert fp32["tw_img_s"] > 0 and fp32["raw_img_s"] > 0 and fp32["tw_ckpt_ms"] > 0
    assert items["accum_bf16_gradckpt_on"]["finite"]
    # Checkpointing recomputes: same arithmetic, the same losses.
    on, off = items["accum_bf16_gradckpt_on"], items["accum_bf16_gradckpt_off"]
    assert on["train_loss"] == off["train_loss"]
    assert 0 < items["grad_ckpt_memory"]["activation_ratio_on_off"] < 1
    table = (tmp_path / "gpu_suite.md").read_text()
    assert "| fp32 |" in table and "accum_fp16_clip | needs CUDA" in table


@pytest.mark.slow
def test_memory_runs_and_checkpointing_saves_activations() -> None:
    out = run_benchmark("memory.py", "--width", "8", "--batch", "8", "--reps", "1")
    assert 0 < float(out["ckpt_act_ratio"]) < 1
    assert float(out["k1_img_s"]) > 0 and float(out["k4_img_s"]) > 0


@pytest.mark.slow
def test_data_pipeline_runs_on_a_real_format_fixture() -> None:
    out = run_benchmark(
        "data_pipeline.py",
        *("--images", "500", "--batches", "2", "--epochs", "1", "--batch", "32"),
        *("--workers", "0", "1", "--persistent", "0", "--width", "4"),
    )
    assert out["best"] in ("w0", "w1")
    assert 0 <= float(out["w0_wait"]) <= 1


@pytest.mark.slow
def test_startup_runs_and_csv_run_does_not_import_wandb() -> None:
    out = run_benchmark(
        "startup.py", "--epochs", "1", "--reps", "1", "--import-reps", "1", "--error-reps", "1"
    )
    assert float(out["startup_s"]) > 0 and float(out["training_s"]) > 0
    assert out["wandb_imported"] == "0"
    # the mistakes are answered, each in one line, before torch is imported
    assert float(out["bad_key_s"]) > 0 and float(out["missing_ckpt_s"]) > 0
    assert out["heavy_imported_on_error"] == "0"


@pytest.mark.slow
def test_resume_position_resumes_where_each_killed_run_stopped() -> None:
    out = run_benchmark("resume_position.py", "--samples", "640", "--reps", "1")
    # 20 batches per epoch: the runs resumed at 5% (step 1) and 95% (step 19) of it
    assert (out["batches_5pct"], out["batches_95pct"], out["epoch_batches"]) == ("1", "19", "20")
    assert float(out["resume_5pct_s"]) > 0 and float(out["resume_95pct_s"]) > 0


@pytest.mark.slow
def test_host_cost_runs_every_side_and_prints_its_ratios() -> None:
    out = run_benchmark("host_cost.py", "--epochs", "2", "--samples", "128", "--reps", "1")
    for side in ("raw", "bare", "lightning", "tw_user", "tw_task", "tw_lm"):
        assert float(out[f"{side}_cpu_us"]) > 0 and float(out[f"{side}_wall_us"]) > 0
    for ratio in ("tw_task_vs_bare", "tw_user_vs_lightning", "tw_task_vs_bare_wall"):
        assert float(out[ratio]) > 0


def test_interleaved_rotates_which_side_goes_first() -> None:
    order: list[str] = []
    sides = {name: (lambda name=name: order.append(name) or name) for name in "abc"}
    runs = harness.interleaved(sides, reps=3, report=lambda rep, results: None)
    assert order == list("abcbcacab")
    assert runs == {"a": ["a"] * 3, "b": ["b"] * 3, "c": ["c"] * 3}


def test_rotated_starts_each_repetition_one_side_later() -> None:
    order: list[str] = []
    sides = {name: (lambda name=name: order.append(name) or name.upper()) for name in "ab"}
    assert harness.rotated(sides, rep=1) == {"a": "A", "b": "B"}  # results keyed, in side order
    assert order == ["b", "a"]


def test_figure_prints_and_records_median_and_spread(capsys: pytest.CaptureFixture[str]) -> None:
    figures: dict[str, float | int | str] = {}
    median = harness.figure(figures, "x_s", [1.0, 3.0, 2.0], "x", " s", spread=True)
    assert median == 2.0 and figures == {"x_s": 2.0, "x_s_spread": pytest.approx(0.5)}
    assert capsys.readouterr().out.startswith("x: median 2 s (min 1, max 3, n=3")


def test_guard_overhead_switches_off_exactly_the_guards_it_profiles() -> None:
    """The "off" side nulls these config keys and the hook share sums these classes' hooks: both
    must name the guards the default config installs, or the figures measure nothing."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cfg = harness.compose([], Path(tmp))
    targets = [cfg.callbacks[key]._target_ for key in guard_overhead.GUARDS]
    assert [t.rsplit(".", 1)[1] for t in targets] == list(guard_overhead.GUARD_CLASSES)


def test_guard_hook_share_reads_the_simple_profiler_table(tmp_path: Path) -> None:
    report = tmp_path / "fit-profile.txt"
    report.write_text(
        "| Action | Mean duration (s) | Num calls | Total time (s) | Percentage % |\n"
        "| Total | - | 100 | 10.0 | 100 % |\n"
        "| [Callback]NonFiniteGuard.on_after_backward | 0.001 | 100 | 0.1 | 1 % |\n"
        "| [Callback]GradNormLogger.on_before_optimizer_step | 0.001 | 100 | 0.1 | 1 % |\n"
        "| [Callback]ModelCheckpoint.on_train_batch_end | 0.01 | 100 | 1.0 | 10 % |\n"
    )
    assert guard_overhead.hook_share(report) == pytest.approx(0.02)


@pytest.mark.slow
def test_guard_overhead_runs_and_prints_its_figures() -> None:
    out = run_benchmark("guard_overhead.py", "--epochs", "1", "--reps", "1")
    assert float(out["guards_on_s"]) > 0 and float(out["guards_off_s"]) > 0
    assert 0 < float(out["guard_hook_share"]) < 1


def test_gpu_suite_names_every_file_with_gpu_tests() -> None:
    import gpu_suite

    marked = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "tests").rglob("test_*.py")
        if "@pytest.mark.gpu\n" in p.read_text()
    )
    assert marked == sorted(gpu_suite.GPU_TESTS)


@pytest.mark.slow  # a minute of training: like every other benchmark run, in make test-slow
def test_imbalance_benchmark_reports_every_side() -> None:
    out = run_benchmark("imbalance.py", "--epochs", "1")
    for side in ("plain", "weighted_sampler", "class_weights"):
        for figure in ("acc", "balanced_acc", "worst_recall"):
            assert 0.0 <= float(out[f"{side}_{figure}"]) <= 1.0
        assert float(out[f"{side}_wall_s"]) > 0


@pytest.mark.slow
def test_doctor_time_runs_both_sides() -> None:
    out = run_benchmark("doctor_time.py", "--baseline", "HEAD", "--reps", "1")
    assert set(out) == {"before_s", "after_s", "ratio"}
    assert 0 < float(out["before_s"]) < 600 and 0 < float(out["after_s"]) < 600


@pytest.mark.slow
def test_serving_benchmark_loses_no_request() -> None:
    out = run_benchmark(
        "serving.py", "--models", "digits_cnn", "--requests", "20", "--load-requests", "64",
        "--concurrency", "8",
    )  # fmt: skip
    assert int(out["digits_cnn_failed"]) == 0
    for side in ("nobatch", "batch"):
        assert float(out[f"digits_cnn_{side}_rps"]) > 0
        assert float(out[f"digits_cnn_{side}_p50_ms"]) > 0
    assert float(out["digits_cnn_batch_over_inproc_b16_x"]) > 0
    assert float(out["digits_cnn_c1_batch_on_over_off_x"]) > 0


@pytest.mark.slow
def test_serving_shutdown_leaves_no_process_behind_serve() -> None:
    out = run_benchmark("serving_shutdown.py")
    assert int(out["serve_exit_code"]) == 0 and int(out["serve_left"]) == 0
    assert int(out["stock_children"]) > 0  # the stock side was measured, whatever it did


@pytest.mark.slow
def test_cv_overhead_runs_both_sides() -> None:
    out = run_benchmark("cv_overhead.py", "--folds", "2", "--reps", "1")
    assert out["folds"] == "2"
    assert float(out["cv_s"]) > 0 and float(out["runs_s"]) > 0
    assert float(out["probe_s"]) > 0 and float(out["oof_per_fold_s"]) > 0


# Imported by the benchmarks, not run; and the GPU suite's own scripts (docs/benchmarks.md).
NOT_A_MAKE_TARGET = {"harness", "raw_loop", "fit_timer", "phase_marker", "gpu_suite", "host_syncs"}


def test_every_benchmark_runs_in_make_bench_or_bench_long() -> None:
    """`make bench` and `make bench-long` together reproduce every CPU figure of
    docs/benchmarks.md: a benchmark script added without a target fails here."""
    lists = {}
    for line in (REPO / "Makefile").read_text().splitlines():
        name, sep, value = line.partition(":=")
        if sep and name.strip() in ("BENCHMARKS", "BENCHMARKS_LONG"):
            lists[name.strip()] = value.split()
    assert set(lists) == {"BENCHMARKS", "BENCHMARKS_LONG"}
    assert not set(lists["BENCHMARKS"]) & set(lists["BENCHMARKS_LONG"])
    scripts = {p.stem for p in BENCH.glob("*.py")} - NOT_A_MAKE_TARGET
    assert scripts == {*lists["BENCHMARKS"], *lists["BENCHMARKS_LONG"]}
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    assert all(f"benchmarks/{name}.py" in docs for name in scripts)
