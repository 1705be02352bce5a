"""Running a benchmark part for its final `key=value` line: as a user runs it, in a subprocess
(`run_benchmark`), or in this process (`run_part`) where the test is about what the part prints,
not about how its runner starts (no interpreter start and no second import of torch per test)."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def final_figures(stdout: str) -> dict[str, str]:
    """The `key=value` pairs of a runner's last line."""
    last = stdout.strip().splitlines()[-1]
    pairs = dict(part.split("=", 1) for part in last.split())
    assert pairs, last
    return pairs


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
    return final_figures(proc.stdout)


def run_part(script: str, *args: str) -> dict[str, str]:
    """`benchmarks/<script> <args>` run in this process (`run_in_process`): its last line."""
    return final_figures(run_in_process(script, *args))


def run_in_process(script: str, *args: str) -> str:
    """`benchmarks/<script> <args>` run in this process: the runner's module imported by its own
    name (the name Hydra builds its callbacks and datamodules from); what it printed. The
    process-wide torch settings a runner sets (its threads; cudnn.benchmark on a GPU) are put
    back afterwards, so later tests run as before."""
    import torch

    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import harness

    runner = importlib.import_module(Path(script).stem)
    # A runner of parts (harness.run_parts) or a script with a main() of its own.
    parts = None if hasattr(runner, "main") else getattr(runner, "PARTS", None) or runner.FEATURES
    threads, cudnn_benchmark = torch.get_num_threads(), torch.backends.cudnn.benchmark
    out = io.StringIO()
    env = {"PYTHONUNBUFFERED": "1", "WANDB_SILENT": "true"}
    try:
        with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(out):
            if parts is None:
                code = runner.main(list(args))
            else:
                code = harness.run_parts(runner.__doc__ or "", parts, list(args))
    except BaseException:
        print(out.getvalue()[-3000:])  # what the part printed before it failed, in the report
        raise
    finally:
        torch.set_num_threads(threads)
        torch.backends.cudnn.benchmark = cudnn_benchmark
    assert code == 0, out.getvalue()[-3000:]
    return out.getvalue()
