"""The training-side benchmarks run small: the trainwell and hand-written loops side by side,
the GPU suite on CPU, memory, the data pipeline, the guards and the host cost.

Each part runs in the test's process (tests/helpers/benchmarks.py: no interpreter start or
torch import of its own); only facts are asserted, never speeds (tests/test_benchmarks.py says
which).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.helpers.benchmarks import run_in_process, run_part


@pytest.mark.slow
def test_overhead_runs_and_both_loops_agree() -> None:
    out = run_part("pace.py", "overhead", "--workload", "digits", "--epochs", "2", "--reps", "1")
    assert float(out["digits_ratio"]) > 0 and float(out["digits_cpu_ratio"]) > 0
    # Same init, data order, optimizer, schedule: the final losses and weights agree.
    assert float(out["digits_maxdiff"]) <= 1e-5
    # Both sides checkpoint every epoch: each spends time in it, and it is printed in ms.
    assert float(out["digits_tw_ckpt_ms"]) > 0 and float(out["digits_raw_ckpt_ms"]) > 0
    assert float(out["digits_tw_fixed_ms"]) > 0


@pytest.mark.slow
def test_throughput_runs_on_cpu() -> None:
    out = run_part(
        "pace.py",
        "throughput",
        *("--num-samples", "48", "--num-val", "16", "--batch", "16", "--width", "4"),
        *("--modes", "fp32", "--epochs", "2"),
    )
    assert out["best_mode"] == "fp32"
    assert float(out["fp32_tw_img_s"]) > 0 and float(out["fp32_raw_img_s"]) > 0
    if out["device"] == "cpu":
        assert math.isnan(float(out["fp32_mfu"]))  # no GPU peak to divide by
        # The gap's split: bare Lightning beside trainwell and the raw loop, the same arithmetic.
        assert float(out["fp32_tw_maxdiff"]) == 0.0 and float(out["fp32_bare_maxdiff"]) == 0.0
    for side in ("tw", "bare", "raw"):
        assert float(out[f"fp32_{side}_step_ms"]) > 0 and float(out[f"fp32_{side}_ckpt_ms"]) > 0
    ratio = float(out["fp32_ratio"])
    split = float(out["fp32_bare_ratio"]) * float(out["fp32_tw_vs_bare"])
    assert ratio == pytest.approx(split, rel=2e-3)  # printed to 4 significant digits


@pytest.mark.slow
def test_op_parity_trainwell_adds_no_copy_of_the_batch_in_channels_last() -> None:
    out = run_part(
        "pace.py",
        "throughput",
        *("--ops", "--num-samples", "48", "--num-val", "16", "--batch", "8", "--width", "4"),
        *("--modes", "fp32", "bf16_cl"),
    )
    for mode in ("fp32", "bf16_cl"):
        # Lightning's own copy of the loss is the only copy beyond the raw loop's, on both sides.
        assert int(out[f"{mode}_tw_extra_copies"]) == int(out[f"{mode}_bare_extra_copies"]), mode
        # The guarantees' operations (docs/benchmarks.md lists them): a new one per step fails.
        assert int(out[f"{mode}_tw_extra_ops"]) <= 18, mode


@pytest.mark.slow
def test_epoch_part_runs_every_side_on_the_same_arithmetic() -> None:
    out = run_part("pace.py", "epoch", "--width", "4", "--reps", "1", "--epochs", "3")
    for side in ("tw", "bare", "raw"):
        assert float(out[f"{side}_ckpt_ms"]) > 0 and float(out[f"{side}_val_setup_ms"]) > 0
        assert float(out[f"{side}_after_ckpt"]) > 0  # 6 steps an epoch: step 0 against 3..5
    assert float(out["tw_maxdiff"]) == 0.0 and float(out["bare_maxdiff"]) == 0.0
    assert float(out["ckpt_val_ratio"]) > 0 and float(out["tw_vs_bare_ckpt_val"]) > 0


@pytest.mark.slow
def test_host_syncs_runs_on_cpu_with_the_probe() -> None:
    out = run_part(
        "host_syncs.py", "--cases", "k4", "--modes", "bf16_cl", "--width", "4", "--samples", "1920"
    )
    assert out["k4_bf16_cl_planted_seen"] == "1"
    assert out["k4_bf16_cl_ours"] == "0" and out["k4_bf16_cl_lightning"] == "0"


@pytest.mark.slow
def test_gpu_suite_runs_on_cpu_and_writes_its_json(tmp_path: Path) -> None:
    run_in_process("gpu_suite.py", "--smoke", "--out", str(tmp_path))
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
    out = run_part("features.py", "memory", "--width", "8", "--batch", "8", "--reps", "1")
    assert 0 < float(out["ckpt_act_ratio"]) < 1
    assert float(out["k1_img_s"]) > 0 and float(out["k4_img_s"]) > 0


@pytest.mark.slow
def test_data_pipeline_runs_on_a_real_format_fixture() -> None:
    out = run_part(
        "features.py",
        "data_pipeline",
        *("--images", "500", "--batches", "2", "--epochs", "1", "--batch", "32"),
        *("--workers", "0", "1", "--persistent", "0", "--width", "4"),
    )
    assert out["best"] in ("w0", "w1")
    assert 0 <= float(out["w0_wait"]) <= 1


@pytest.mark.slow
def test_host_part_runs_every_side_and_prints_its_ratios() -> None:
    out = run_part("pace.py", "host", "--epochs", "2", "--samples", "128", "--reps", "1")
    for side in ("raw", "bare", "bare_task", "lightning", "tw_user", "tw_task", "tw_lm"):
        assert float(out[f"{side}_cpu_us"]) > 0 and float(out[f"{side}_wall_us"]) > 0
    for ratio in (
        "tw_task_vs_bare",
        "tw_task_vs_bare_task",
        "tw_user_vs_lightning",
        "tw_task_vs_bare_wall",
    ):
        assert float(out[ratio]) > 0


@pytest.mark.slow
def test_ema_cost_runs_and_prints_its_figures() -> None:
    out = run_part("features.py", "ema", "--epochs", "2", "--reps", "1")
    for key in ("ema_step_ratio", "lightning_step_ratio", "ema_update_ms", "lightning_update_ms"):
        assert float(out[key]) > 0, key
    assert int(out["tensors"]) > 0


@pytest.mark.slow
def test_guard_overhead_runs_and_prints_its_figures() -> None:
    out = run_part("features.py", "guards", "--epochs", "1", "--reps", "1")
    assert float(out["guards_on_s"]) > 0 and float(out["guards_off_s"]) > 0
    assert 0 < float(out["guard_hook_share"]) < 1
