"""What every benchmark shares: the real config tree, repetition statistics, the final line.

Benchmarks compose the same Hydra config `scripts/train.py` composes (never a parallel set of
settings), so a figure measures what a user runs. Each benchmark ends with one machine-readable
line of `key=value` pairs; `make bench` and docs/benchmarks.md read that line.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

try:  # a checkout that was copied, not pip-installed (a GPU box): use its src/ directly
    import trainwell  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO / "src"))


def compose(overrides: Sequence[str], output_dir: Path) -> Any:
    """The config train.py would see for these overrides, with the run dir pinned.

    `paths.output_dir` is `${hydra:runtime.output_dir}`, which only exists inside hydra.main; the
    compose API has no runtime, so it is set here, as tests/conftest.py does.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import open_dict

    import trainwell.resolvers  # noqa: F401  (the config tree uses trainwell's resolvers)

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra_compose(config_name="train", overrides=list(overrides))
    with open_dict(cfg):
        cfg.paths.root_dir = str(REPO)
        cfg.paths.output_dir = str(output_dir)
    return cfg


def set_threads(threads: int) -> None:
    """Pin torch's intra-op threads. On a shared 2-core machine, 2 OpenMP threads that spin-wait
    for a descheduled sibling made the same 20 digits steps take 4.5-19.6 s instead of 1.4 s with
    one thread: a figure taken that way measures the neighbours, not the code."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)


def add_common_args(parser: Any, threads: int = 1) -> None:
    parser.add_argument(
        "--threads", type=int, default=threads, help="torch intra-op threads (0: torch default)"
    )


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, process CPU seconds, result) of fn()."""
    start, start_cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - start, time.process_time() - start_cpu, result


def interleaved(
    sides: dict[str, Callable[[], Any]], reps: int, report: Callable[[int, dict[str, Any]], None]
) -> dict[str, list[Any]]:
    """Every side once per repetition, the order rotating between repetitions, so drift in the
    machine's load (neighbours, thermal state) hits every side alike. `report(rep, results)`
    runs after each repetition (a progress line); returns each side's results in rep order."""
    names = list(sides)
    out: dict[str, list[Any]] = {name: [] for name in names}
    for rep in range(reps):
        shift = rep % len(names)
        results = {name: sides[name]() for name in names[shift:] + names[:shift]}
        for name in names:
            out[name].append(results[name])
        report(rep, results)
    return out


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median and spread (min, max, and the half-range relative to the median)."""
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return {"median": med, "min": lo, "max": hi, "spread": (hi - lo) / 2 / med if med else 0.0}


def fixed_costs(run: dict[str, Any]) -> dict[str, float]:
    """Per-epoch fixed cost in ms (median of the steady-state epochs) and its named parts."""
    epochs = range(1, len(run["epoch_seconds"])) if len(run["epoch_seconds"]) > 1 else range(1)
    fixed, ckpt, setup = [], [], []
    for e in epochs:
        val_batches = run["val_seconds"][e] - run["val_setup_seconds"][e]
        fixed.append(run["epoch_seconds"][e] - run["train_seconds"][e] - val_batches)
        ckpt.append(run["ckpt_seconds"][e])
        setup.append(run["val_setup_seconds"][e])
    return {
        "fixed_ms": 1000 * statistics.median(fixed),
        "ckpt_ms": 1000 * statistics.median(ckpt),
        "val_setup_ms": 1000 * statistics.median(setup),
    }


def describe(name: str, values: Sequence[float], unit: str = "") -> str:
    s = summary(values)
    return (
        f"{name}: median {s['median']:.4g}{unit} (min {s['min']:.4g}, max {s['max']:.4g}, "
        f"n={len(values)}, +/-{100 * s['spread']:.1f}%)"
    )


def machine() -> str:
    """One line naming where a figure came from: date, CPU/GPU, load (the table needs it)."""
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"date={datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%MZ')} "
        f"host_cpus={os.cpu_count()} device={device.replace(' ', '_')} "
        f"threads={torch.get_num_threads()} torch={torch.__version__} load1={load:.2f} "
        f"python={platform.python_version()}"
    )


def header(title: str) -> None:
    print(f"# {title}", flush=True)
    print(f"# {machine()}", flush=True)
    print(f"# command: {' '.join([Path(sys.executable).name, *sys.argv])}", flush=True)


def output_dir(explicit: str | None = None) -> Path | None:
    """Where a benchmark writes its JSON and table: --out, else $OUT when set, else nowhere."""
    chosen = explicit or os.environ.get("OUT")
    if not chosen:
        return None
    path = Path(chosen)
    path.mkdir(parents=True, exist_ok=True)
    return path


def final_line(**figures: float | int | str) -> None:
    """The benchmark's result: the LAST line of stdout, `key=value` pairs separated by spaces."""
    parts = []
    for key, value in figures.items():
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    print(" ".join(parts), flush=True)
