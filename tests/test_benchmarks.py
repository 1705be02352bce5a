"""The benchmarks' own parts (the harness, the hand-written loop, the GPU suite's lists).

The benchmarks themselves run in tests/test_benchmarks_*.py, split so that pytest's workers run
them side by side: each part runs with tiny settings, in the test's process where the test is
about what it prints, or as a user runs it (`python benchmarks/<x>.py [part]`, a subprocess)
where it is about the processes it starts (tests/helpers/benchmarks.py); the figures they print
are checked only where the figure is a fact rather than a speed: trainwell and the hand-written
loop agree to 1e-5, checkpointing lowers activation memory, wandb is not imported by a
logger=csv run. Speeds depend on the machine and are never asserted.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.benchmarks import BENCH, REPO

sys.path.insert(0, str(BENCH))  # benchmarks/ is a folder of scripts, not a package

import features
import harness
import loops
import pace


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
    assert loops.window_sizes(loader, accumulate) == expected
    assert sum(expected) == samples


def test_bf16_peak_lookup_prefers_the_specific_name() -> None:
    assert pace.bf16_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert pace.bf16_peak("NVIDIA H100 PCIe") == 756e12
    assert pace.bf16_peak("NVIDIA H200") == 989e12
    assert pace.bf16_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert pace.bf16_peak("Some Future GPU") is None


def test_a_benchmark_imports_the_trainwell_next_to_it(tmp_path: Path) -> None:
    """Not another checkout's through an editable install (a second clone, a worktree)."""
    import os
    import subprocess

    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import harness, trainwell; "
    code += "print(trainwell.__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).resolve().is_relative_to(REPO / "src")


def test_after_checkpoint_compares_step_zero_with_the_epochs_second_half() -> None:
    # Epoch 0 (warm-up) is left out; each later epoch: step 0 / median of its second half.
    steps = [[9.0, 1.0, 1.0, 1.0], [2.0, 5.0, 1.0, 1.0], [3.0, 1.0, 2.0, 2.0]]
    assert harness.after_checkpoint(steps) == pytest.approx((2.0 + 1.5) / 2)
    assert math.isnan(harness.after_checkpoint([[1.0, 1.0], [1.0, 1.0]]))  # too few steps


def test_step_clock_times_each_step_from_its_start_to_the_next() -> None:
    clock = harness.StepClock()
    for _ in range(2):
        clock.epoch()
        for _ in range(3):
            clock.mark()
    seconds = clock.seconds()
    assert [len(epoch) for epoch in seconds] == [2, 2] and all(s >= 0 for e in seconds for s in e)


def test_step_clock_on_the_host_keeps_the_training_threads_cpu_time() -> None:
    clock = harness.StepClock(host=True)
    clock.epoch()
    clock.mark()
    deadline = time.thread_time() + 0.02
    while time.thread_time() < deadline:  # busy: CPU time passes on this thread
        pass
    clock.mark()
    time.sleep(0.05)  # idle: wall time passes, this thread's CPU time hardly does
    clock.mark()
    (wall,), (cpu,) = clock.seconds(), clock.cpu_seconds()
    assert cpu[0] >= 0.02 and wall[1] >= 0.05 and cpu[1] < wall[1]
    with pytest.raises(ValueError, match="host=True"):
        harness.StepClock().cpu_seconds()


def test_host_part_reads_one_window_per_epoch_from_the_step_clock() -> None:
    """`pace.py host` marks each epoch's first batch start and last batch end: one window each,
    with its batch count; an epoch cut short before its last batch is left out."""
    clock = harness.StepClock(host=True)
    for _ in range(2):
        clock.epoch()
        clock.mark()
        clock.mark()
    clock.epoch()
    clock.mark()  # started, never finished
    windows = pace.epoch_windows(clock, [8, 7])
    assert [n for _, _, n in windows] == [8, 7]
    assert all(wall >= 0 and cpu >= 0 for wall, cpu, _ in windows)


@pytest.mark.example("project.tasks.classification")
def test_host_bare_task_side_trains_tw_tasks_module_with_its_training_metrics(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`bare_task` does tw_task's work under a bare Trainer: the same task class and net, its
    training metrics updated at every step."""
    built, updates = [], []

    def counting(name: str, update: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> None:
            updates.append(name)
            update(*args, **kwargs)

        return counted

    def task_module(samples: int, tmp: Path) -> object:
        module = build(samples, tmp)
        for name in ("train_acc", "train_loss"):
            metric = getattr(module, name)
            metric.update = counting(name, metric.update)
        built.append(module)
        return module

    build = pace.task_module
    monkeypatch.setattr(pace, "task_module", task_module)
    assert pace.host_side("bare_task", 2, 64)["cpu"] > 0  # 2 epochs of 4 steps
    (module,) = built
    trainwell_side = pace.trainwell_config("tw_task", 1, 64, tmp_path)
    assert type(module).__name__ == "ClassificationTask"
    assert str(module.net) == str(pace.instantiate(trainwell_side.model.net))
    assert sorted(updates) == ["train_acc"] * 8 + ["train_loss"] * 8


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

    saver = loops.EpochCheckpoints(tmp_path, mode)
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
    args = pace.throughput_options([], cuda=False)
    base = pace.base_overrides(args, cuda=False)
    assert "data.on_device=true" in base and "data.augment=true" in base
    for mode, (overrides, model_cl, _) in pace.MODES.items():
        data_cl = "data.channels_last=true" in overrides
        assert data_cl == model_cl, mode  # NHWC batches exactly when the model is NHWC


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


def test_ema_cost_sides_differ_only_by_their_average() -> None:
    """features.py ema's sides: no average, the template's EMA, Lightning's EMA callback; the same
    decay, nothing else changed."""
    import tempfile

    from hydra.utils import instantiate
    from lightning.pytorch.callbacks import EMAWeightAveraging

    from trainwell.callbacks.ema import ExactEMA, ema_callbacks

    with tempfile.TemporaryDirectory() as tmp:
        cfgs = {k: harness.compose(v, Path(tmp)) for k, v in features.EMA_SIDES.items()}
    assert ema_callbacks(cfgs["off"]) == [] and ema_callbacks(cfgs["lightning"]) == []
    (ema,) = ema_callbacks(cfgs["ema"])
    assert isinstance(ema, ExactEMA) and ema.decay == features.DECAY
    stock = instantiate(cfgs["lightning"].callbacks.stock_ema)
    assert type(stock) is EMAWeightAveraging
    assert set(cfgs["lightning"].callbacks) - set(cfgs["off"].callbacks) == {"stock_ema"}


def test_guard_overhead_switches_off_exactly_the_guards_it_profiles() -> None:
    """The "off" side nulls these config keys and the hook share sums these classes' hooks: both
    must name the guards the default config installs, or the figures measure nothing."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cfg = harness.compose([], Path(tmp))
    targets = [cfg.callbacks[key]._target_ for key in features.GUARDS]
    assert [t.rsplit(".", 1)[1] for t in targets] == list(features.GUARD_CLASSES)


def test_guard_hook_share_reads_the_simple_profiler_table(tmp_path: Path) -> None:
    report = tmp_path / "fit-profile.txt"
    report.write_text(
        "| Action | Mean duration (s) | Num calls | Total time (s) | Percentage % |\n"
        "| Total | - | 100 | 10.0 | 100 % |\n"
        "| [Callback]NonFiniteGuard.on_after_backward | 0.001 | 100 | 0.1 | 1 % |\n"
        "| [Callback]GradNormLogger.on_before_optimizer_step | 0.001 | 100 | 0.1 | 1 % |\n"
        "| [Callback]ModelCheckpoint.on_train_batch_end | 0.01 | 100 | 1.0 | 10 % |\n"
    )
    assert features.hook_share(report) == pytest.approx(0.02)


def test_startup_times_an_import_in_a_fresh_interpreter() -> None:
    # The slow startup test skips the import times (--import-reps 0): their timer is checked here.
    assert 0 < features.import_seconds("json", threads=1) < 60


def test_gpu_suite_names_every_file_with_gpu_tests() -> None:
    import gpu_suite

    marked = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "tests").rglob("test_*.py")
        if "@pytest.mark.gpu\n" in p.read_text()
    )
    assert marked == sorted(gpu_suite.GPU_TESTS)


# Imported by the benchmarks, not run; and the GPU suite's own scripts (docs/benchmarks.md).
NOT_A_MAKE_TARGET = {
    "harness",
    "loops",
    "gpu_suite",
    "sync_probe",
}
# The parts of a runner that print no figures: the server `shipping.py serving` measures ours
# against.
NOT_A_PART = {"shipping": {"peer"}}


def test_every_benchmark_runs_in_make_bench_or_bench_long() -> None:
    """`make bench` and `make bench-long` together reproduce every CPU figure of
    docs/benchmarks.md: a benchmark script, or a part of a runner (`runner:part`), added without a
    target fails here, and so does one the docs do not name."""
    import shipping

    lists = {}
    for line in (REPO / "Makefile").read_text().splitlines():
        name, sep, value = line.partition(":=")
        if sep and name.strip() in ("BENCHMARKS", "BENCHMARKS_LONG"):
            lists[name.strip()] = value.split()
    assert set(lists) == {"BENCHMARKS", "BENCHMARKS_LONG"}
    entries = [*lists["BENCHMARKS"], *lists["BENCHMARKS_LONG"]]
    assert len(set(entries)) == len(entries)
    listed: dict[str, set[str]] = {}
    for entry in entries:
        script, _, part = entry.partition(":")
        listed.setdefault(script, set()).add(part)
    runners = {"features": features.FEATURES, "shipping": shipping.PARTS, "pace": pace.PARTS}
    scripts = {p.stem for p in BENCH.glob("*.py")} - NOT_A_MAKE_TARGET
    assert set(listed) == scripts
    for script, parts in listed.items():
        expected = (
            set(runners[script]) - NOT_A_PART.get(script, set()) if script in runners else {""}
        )
        assert parts == expected, script
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    commands = [f"benchmarks/{s}.py {p}".strip() for s, parts in listed.items() for p in parts]
    assert [c for c in commands if c not in docs] == []


def _profiled(fn: object) -> list:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        fn()  # type: ignore[operator]
    return list(prof.events())


def test_op_parity_counts_the_extra_copies_and_names_where_they_come_from() -> None:
    import torch

    x = torch.randn(2, 3, 4, 4)

    def raw_step() -> None:
        (x * 2).sum()

    def our_step() -> None:
        # Views and a conversion that copies nothing launch no kernel: not counted.
        x.detach().view(2, -1).to(torch.float32)
        y = x.to(memory_format=torch.channels_last)  # a memory-format copy
        (y * 2).sum()
        y.clone()

    counts = {
        "raw": pace.op_counts(_profiled(raw_step)),
        "bare": pace.op_counts(_profiled(raw_step)),
        "tw": pace.op_counts(_profiled(our_step)),
    }
    text, figures = pace.ops_table("m", counts)
    rows = text.splitlines()
    assert figures == {
        "m_tw_extra_ops": 2, "m_tw_extra_copies": 2, "m_bare_extra_ops": 0,
        "m_bare_extra_copies": 0,
    }  # fmt: skip
    assert [row.split(" | ")[1] for row in rows] == ["aten::clone", "aten::to"]
    assert all("test_benchmarks.py" in row for row in rows)  # the line that called it
