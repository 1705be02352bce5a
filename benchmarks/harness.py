"""What every benchmark shares: the real config tree, its opening (`parse_args`, or `run_parts`
for a runner of several parts), the interleaved A/B loop, repetition statistics and the final
figure line.

Benchmarks compose the same Hydra config `scripts/train.py` composes (never a parallel set of
settings), so a figure measures what a user runs. Sides compared in one process run through
`interleaved` (or `rotated`, one repetition of it). Each benchmark ends with one machine-readable
line of `key=value` pairs (`final_line`); `make bench` and docs/benchmarks.md read that line.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

# This checkout's src/ first, as scripts/_bootstrap.py does for the scripts: a benchmark measures
# the code next to it, never another checkout's through an editable install (and a copied,
# uninstalled checkout on a GPU box finds its trainwell at all).
if str(REPO / "src") not in sys.path:
    sys.path.insert(1, str(REPO / "src"))


# --- workloads: which example each needs, and the engine's own stand-in -------------------------

# The engine tests' own small modules (tests/owned, configs in tests/conf): digits from
# scikit-learn and a Flatten-Linear-Tanh-Linear classifier. A clone that deleted the examples
# (docs/your-project.md) keeps them, so an engine figure can still be taken there.
TEST_CONF = REPO / "tests" / "conf"
# It logs val/acc: the monitor is pinned, since a cloner's conf/train.yaml monitors what their
# own module logs (val/mae, say), which the stand-in does not.
OWNED = (
    f"hydra.searchpath=[file://{TEST_CONF}]",
    "data=owned",
    "model=owned",
    "monitor.metric=val/acc",
    "monitor.mode=max",
)


@dataclass(frozen=True)
class Workload:
    """A run a benchmark composes: its overrides, the example modules they need and, in a clone
    without them, the overrides on the engine's own modules (`owned`; None: the workload measures
    the example itself and is skipped)."""

    name: str  # as the header and a skip line say it: "the digits example"
    overrides: tuple[str, ...]
    needs: tuple[str, ...]
    owned: tuple[str, ...] | None = None


# The template's default run, conf/train.yaml's defaults as shipped (digits, DigitsCNN, the
# ClassificationTask): no overrides where the example is here.
DIGITS = Workload(
    "the digits example",
    (),
    ("project.data.digits", "project.models.digits_cnn", "project.tasks.classification"),
    owned=OWNED,
)
# The same stand-in with no learning-rate schedule: the owned model's StepLR takes no total
# steps, which the hand-written loop's scheduler call passes (loops.Built.optimization).
DIGITS_CONSTANT_LR = Workload(
    DIGITS.name, DIGITS.overrides, DIGITS.needs, owned=(*OWNED, "model.scheduler=null")
)
CLASSIFIER = ("project.tasks.classification",)
RESNET = ("project.models.resnet", "project.tasks.classification")
SYNTHETIC = ("project.data.synthetic",)
OWNED_NOTE = "on the engine's own digits (tests/owned)"


def missing(modules: Sequence[str]) -> list[str]:
    """The modules of `modules` this checkout cannot import (found, not imported: cheap)."""
    import importlib.util

    gone = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent package is gone (`project` deleted)
            found = False
        if not found:
            gone.append(name)
    return gone


def is_owned(workload: Workload) -> bool:
    """True when this checkout lacks the workload's example and it runs on the owned modules."""
    return bool(missing(workload.needs)) and workload.owned is not None


def resolve(workload: Workload) -> list[str] | None:
    """The workload's overrides in this checkout: its own where its example is here, else the
    owned stand-in's (the repo root importable, for `tests.owned`), else None (skip it)."""
    if not missing(workload.needs):
        return list(workload.overrides)
    if workload.owned is None:
        return None
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    return list(workload.owned)


def default_run() -> list[str]:
    """The default run's overrides in this checkout: none, or the owned stand-in's."""
    found = resolve(DIGITS)
    assert found is not None  # DIGITS has an owned stand-in
    return found


def substitution(workload: Workload) -> str:
    """What the header says when the owned stand-in runs, else ''."""
    if not is_owned(workload):
        return ""
    return f"{OWNED_NOTE}: {workload.name} is not in this clone"


def skip_line(what: str, gone: Sequence[str]) -> str:
    """The one line a part (or a workload of one) prints in place of its figures."""
    return f"skipped: {what} measures an example not in this clone ({', '.join(gone)})"


def compose(overrides: Sequence[str], output_dir: Path) -> Any:
    """The config train.py would see for these overrides, with the run dir pinned."""
    from trainwell.training.compose import compose_run_config

    return compose_run_config(CONF, overrides, output_dir, REPO)


def set_threads(threads: int) -> None:
    """Pin torch's intra-op threads. On a shared 2-core machine, 2 OpenMP threads that spin-wait
    for a descheduled sibling made the same 20 digits steps take 4.5-19.6 s instead of 1.4 s with
    one thread: a figure taken that way measures the neighbours, not the code."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)


def parse_args(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    title: str | Callable[[argparse.Namespace], str],
    threads: int = 1,
) -> argparse.Namespace:
    """Every benchmark's opening: `--threads` added, arguments parsed, threads pinned, header
    printed (after pinning, so it names the threads the figures were taken with). `title` may
    be a function of the parsed arguments."""
    add_threads(parser, threads)
    args = parser.parse_args(argv)
    opened(args, title)
    return args


def add_threads(parser: argparse.ArgumentParser, threads: int = 1) -> None:
    """`--threads`, which every benchmark (and every side of features.py) takes."""
    parser.add_argument(
        "--threads", type=int, default=threads, help="torch intra-op threads (0: torch default)"
    )


def opened(args: argparse.Namespace, title: str | Callable[[argparse.Namespace], str]) -> None:
    """After parsing: threads pinned, then the header (naming the threads the figures use)."""
    set_threads(args.threads)
    header(title if isinstance(title, str) else title(args))


@dataclass(frozen=True)
class Part:
    """One part of a runner (`<runner>.py <part> [options]`): its options, its figures (the
    dict its last line prints; its docstring is the part's `-h`), its header's title."""

    title: Callable[[argparse.Namespace], str]
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], dict[str, float | int | str]]
    threads: int = 1  # --threads' default: torch's intra-op threads here and in child runs
    header: bool = True  # False: a process another part starts (a server): no header, no pinning
    # The example modules the part measures (a ResNet's memory, the CIFAR-10 loader): in a clone
    # without them the part prints one line and ends cleanly.
    needs: tuple[str, ...] = ()
    # The workload its figures come from, when the owned stand-in may replace it: the header
    # then says so, so that a figure is never read as the documented one.
    workload: Workload | None = None


def run_parts(doc: str, parts: dict[str, Part], argv: Sequence[str] | None = None) -> int:
    """A runner's opening and end: the part chosen on the command line, its options parsed,
    threads pinned, the header, its figures as the last line."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    choices = parser.add_subparsers(dest="part", required=True, metavar="PART")
    for name, part in parts.items():
        text = inspect.cleandoc(part.run.__doc__ or name)
        sub = choices.add_parser(
            name,
            help=text.splitlines()[0].replace("%", "%%"),  # argparse %-formats a help string
            description=text,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        part.arguments(sub)
        add_threads(sub, part.threads)
    args = parser.parse_args(argv)
    part = parts[args.part]
    gone = missing(part.needs)
    if gone:
        print(skip_line(f"part {args.part!r}", gone), flush=True)
        return 0
    if part.header:
        note = substitution(part.workload) if part.workload else ""
        title = part.title(args) + (f", {note}" if note else "")
        opened(args, title)  # a part without one (a server) reads --threads itself
    final_line(**part.run(args))
    return 0


def child_env(threads: int) -> dict[str, str]:
    """The environment of a child `scripts/train.py` (or python -c) a benchmark times: benchmarks/
    importable (Hydra builds the benchmark's marker callbacks by name), output unbuffered (a
    marker's wall clock is read when its line arrives) and OpenMP threads as `--threads` says
    (0: removed, torch's default)."""
    # The repo root too where the owned stand-in runs: its configs name `tests.owned.*`.
    owned = [str(REPO)] if is_owned(DIGITS) else []
    paths = [str(REPO / "benchmarks"), *owned, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(paths)}
    if threads > 0:
        env["OMP_NUM_THREADS"] = str(threads)
    else:
        env.pop("OMP_NUM_THREADS", None)
    return env


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, process CPU seconds, result) of fn()."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def rotated(sides: dict[str, Callable[[], Any]], rep: int) -> dict[str, Any]:
    """Every side once, starting with side `rep % len(sides)`: repetition `rep` of an A/B."""
    names = list(sides)
    shift = rep % len(names)
    results = {name: sides[name]() for name in names[shift:] + names[:shift]}
    return {name: results[name] for name in names}


def interleaved(
    sides: dict[str, Callable[[], Any]],
    reps: int,
    report: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, list[Any]]:
    """Every side once per repetition, the order rotating between repetitions, so drift in the
    machine's load (neighbours, thermal state) hits every side alike. `report(rep, results)`
    runs after each repetition (a progress line); returns each side's results in rep order."""
    out: dict[str, list[Any]] = {name: [] for name in sides}
    for rep in range(reps):
        results = rotated(sides, rep)
        for name, result in results.items():
            out[name].append(result)
        if report is not None:
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
    costs = {
        "fixed_ms": 1000 * statistics.median(fixed),
        "ckpt_ms": 1000 * statistics.median(ckpt),
        "val_setup_ms": 1000 * statistics.median(setup),
    }
    for part in ("ckpt", "val_setup"):  # the training thread's CPU time, where recorded
        if run.get(f"{part}_cpu"):
            costs[f"{part}_cpu_ms"] = 1000 * statistics.median(
                run[f"{part}_cpu"][e] for e in epochs
            )
    return costs


class StepClock:
    """The time between consecutive training-batch starts, per epoch: a step's duration.

    On a GPU the marks are CUDA events on the current stream (no host sync; read at the end), so
    a step that waits on the host (a held GIL, a host sync) shows as device time lost.
    `host=True`: the host's clocks whatever the device, wall time and the training thread's CPU
    time (`cpu_seconds`): what a step's Python costs. On a loaded shared machine wall time also
    measures the neighbours; the thread's CPU time does not."""

    def __init__(self, host: bool = False) -> None:
        # Decided at the first mark, when the run uses its device (never, on the host's clocks).
        self._cuda: bool | None = False if host else None
        self._host = host
        self.epochs: list[list[Any]] = []
        self.cpu: list[list[float]] = []  # host=True: the thread's CPU time at each mark

    def epoch(self) -> None:
        self.epochs.append([])
        self.cpu.append([])

    def mark(self) -> None:
        import torch

        if not self.epochs:
            self.epoch()
        if self._cuda is None:
            self._cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.epochs[-1].append(event)
        else:
            self.epochs[-1].append(time.perf_counter())
            if self._host:
                self.cpu[-1].append(time.thread_time())

    def seconds(self) -> list[list[float]]:
        """Per epoch, the duration of every step but the last (which has no next start)."""
        if self._cuda:
            import torch

            torch.cuda.synchronize()
            return [
                [a.elapsed_time(b) / 1000 for a, b in itertools.pairwise(marks)]
                for marks in self.epochs
            ]
        return [[b - a for a, b in itertools.pairwise(marks)] for marks in self.epochs]

    def cpu_seconds(self) -> list[list[float]]:
        """`host=True`: as `seconds`, in the training thread's CPU time."""
        if not self._host:
            raise ValueError("StepClock: CPU time is kept on the host's clocks only (host=True)")
        return [[b - a for a, b in itertools.pairwise(marks)] for marks in self.cpu]


def after_checkpoint(step_seconds: list[list[float]]) -> float:
    """How much longer the first step after an epoch's checkpoints takes than a steady one:
    median over the epochs after the first of step 0 / the median step of the epoch's second half
    (the background writes of the checkpoint overlap step 0). NaN with under 4 steps per epoch."""
    ratios = []
    for steps in step_seconds[1:]:
        if len(steps) < 3:
            continue
        steady = statistics.median(steps[len(steps) // 2 :])
        ratios.append(steps[0] / steady)
    return statistics.median(ratios) if ratios else float("nan")


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


def figure(
    figures: dict[str, float | int | str],
    key: str,
    values: Sequence[float],
    label: str,
    unit: str = "",
    spread: bool = False,
) -> float:
    """Print `label`'s median and spread, record the median as figure `key` (and its spread as
    `key_spread` when asked); returns the median."""
    print(describe(label, values, unit), flush=True)
    s = summary(values)
    figures[key] = s["median"]
    if spread:
        figures[f"{key}_spread"] = s["spread"]
    return s["median"]


def final_line(**figures: float | int | str) -> None:
    """The benchmark's result: the LAST line of stdout, `key=value` pairs separated by spaces."""
    parts = []
    for key, value in figures.items():
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    print(" ".join(parts), flush=True)
