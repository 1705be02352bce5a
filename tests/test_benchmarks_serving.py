"""The serving benchmarks run small: throughput and latency over HTTP against a LitServe server
and ONNX Runtime in-process, and the shutdown.

Each script is run as a user runs it (tests/helpers/benchmarks.py); only facts are asserted,
never speeds (tests/test_benchmarks.py says which).
"""

from __future__ import annotations

import pytest

from tests.helpers.benchmarks import run_benchmark


@pytest.mark.slow
def test_serving_benchmark_loses_no_request() -> None:
    out = run_benchmark(
        "shipping.py", "serving", "--models", "digits_cnn", "--requests", "20", "--load-requests", "64",
        "--concurrency", "8", "--rounds", "1",
    )  # fmt: skip
    assert int(out["digits_cnn_failed"]) == 0  # our three sides and the LitServe peer's
    for side in ("nobatch", "batch", "batch_npy", "litserve", "litserve_npy"):
        assert float(out[f"digits_cnn_{side}_rps"]) > 0
        assert float(out[f"digits_cnn_{side}_p50_ms"]) > 0
        assert float(out[f"digits_cnn_{side}_worker_cpu_ms"]) >= 0  # measured (ticks of 10 ms)
    assert float(out["digits_cnn_batch_over_inproc_b16_x"]) > 0
    assert float(out["digits_cnn_c1_batch_on_over_off_x"]) > 0
    # The figures against the LitServe peer, for the model run (resnet18 when it is).
    assert out["headline_model"] == "digits_cnn"
    for key in ("batched_vs_litserve", "batched_vs_litserve_npy"):
        assert float(out[key]) == float(out[f"digits_cnn_{key}"]) > 0
    for key in ("c1_over_litserve_ms", "c1_over_litserve_ms_npy"):
        assert out[key] == out[f"digits_cnn_{key}"]
        float(out[key])  # a number of either sign


@pytest.mark.slow
def test_serving_shutdown_leaves_no_process_behind_serve() -> None:
    out = run_benchmark("shipping.py", "shutdown")
    assert int(out["serve_exit_code"]) == 0 and int(out["serve_left"]) == 0
    assert int(out["stock_children"]) > 0  # the stock side was measured, whatever it did
