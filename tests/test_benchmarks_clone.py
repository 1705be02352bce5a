"""`make bench` in a clone without the examples: every part either runs on the engine's own
modules (tests/owned) or says in one line which example it measures and ends cleanly.

The examples are hidden in-process (`project` cannot be found), every workload the benchmarks
declare (harness.Workload) is resolved and composed, and every part `make bench` and
`make bench-long` run is started just far enough to see it skip; nothing trains.
"""

from __future__ import annotations

import importlib.abc
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from tests.helpers.benchmarks import BENCH, REPO

sys.path.insert(0, str(BENCH))  # benchmarks/ is a folder of scripts, not a package

import features
import harness
import host_syncs
import pace
import shipping

pytestmark = pytest.mark.engine

EXAMPLES = "project"
RUNNERS = {"pace": pace.PARTS, "features": features.FEATURES, "shipping": shipping.PARTS}


class _Deleted(importlib.abc.MetaPathFinder):
    """Finds no `project`: as in a clone that deleted the examples."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] == EXAMPLES:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@pytest.fixture
def deleted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [n for n in sys.modules if n.split(".")[0] == EXAMPLES]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Deleted(), *sys.meta_path])
    assert harness.missing(["project.data.digits"]) == ["project.data.digits"]
    yield


def make_parts() -> list[tuple[str, str]]:
    """(runner, part) of every part `make bench` and `make bench-long` run."""
    text = (REPO / "Makefile").read_text()
    parts = []
    for var in ("BENCHMARKS", "BENCHMARKS_LONG"):
        line = re.search(rf"^{var} := (.*)$", text, re.M)
        assert line, var
        parts += [tuple((item + ":").split(":")[:2]) for item in line.group(1).split()]
    parts += re.findall(r"benchmarks/(\w+)\.py (\w+) --ops", text)  # the op parity line
    return parts


def workloads() -> dict[str, harness.Workload]:
    """Every workload the benchmarks declare, by where it is declared."""
    found = {}
    for module in (harness, pace, features, host_syncs, shipping):
        for name, value in vars(module).items():
            values = value.items() if isinstance(value, dict) else [("", value)]
            for key, item in values:
                if isinstance(item, harness.Workload):
                    found[f"{module.__name__}.{name}{f'[{key}]' if key else ''}"] = item
    return found


def example_targets(cfg: Any) -> list[str]:
    """Every string of the config that names the examples' package (a `_target_`, mostly)."""
    names: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and node.startswith(f"{EXAMPLES}."):
            names.append(node)

    walk(OmegaConf.to_container(cfg, resolve=False))
    return names


def test_every_make_bench_part_is_found() -> None:
    parts = make_parts()
    assert len(parts) > 15
    for runner, part in parts:
        if runner == "host_syncs":
            assert part == "", part
        else:
            assert part in RUNNERS[runner], f"{runner}:{part}"


def test_every_workload_runs_owned_or_skips_in_a_clone_without_the_examples(
    deleted: None, tmp_path: Path
) -> None:
    found = workloads()
    assert {"harness.DIGITS", "pace.WORKLOADS[resnet18]", "features.RESUMED"} <= set(found)
    for where, workload in found.items():
        assert workload.needs, where  # a workload that needs no example needs no declaration
        overrides = harness.resolve(workload)
        if overrides is None:
            continue  # skipped, in one line
        assert harness.is_owned(workload), where
        assert example_targets(harness.compose(overrides, tmp_path)) == [], where


def test_the_overrides_the_engine_parts_build_name_no_example(
    deleted: None, tmp_path: Path
) -> None:
    """What the engine parts compose, built as they build it: the default run (guards, cv, ema,
    summary, startup, doctor), the resumed run, the sync count's default case, the host part's
    trainwell side on a user's module, the overhead's digits workload."""
    built = {
        "default run": harness.default_run(),
        "resume": features.resume_overrides(64, 8),
        "host_syncs default": host_syncs.case_overrides("default", "fp32", 4, 64),
        "overhead digits": harness.resolve(pace.WORKLOADS["digits"]),
    }
    for name, overrides in built.items():
        assert overrides is not None, name
        assert example_targets(harness.compose(overrides, tmp_path)) == [], name
    cfg = pace.trainwell_config("tw_user", 1, 32, tmp_path)
    assert example_targets(cfg) == []
    optimizer, schedule = pace.task_optimization(
        [pytest.importorskip("torch").zeros(1, requires_grad=True)], 10
    )
    assert type(optimizer).__name__ == "SGD" and schedule is not None


@pytest.mark.parametrize(("runner", "part"), [p for p in make_parts() if p[0] in RUNNERS])
def test_a_part_that_measures_an_example_says_so_in_one_line(
    runner: str, part: str, deleted: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """In the clone a part either skips (one line, exit 0) or has what it runs: its workload's
    owned stand-in (checked above) or no example at all."""
    declared = RUNNERS[runner][part]
    gone = harness.missing(declared.needs)
    if not gone:
        return  # it runs: its workloads are checked above
    code = harness.run_parts("", {part: declared}, [part])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines == [harness.skip_line(f"part {part!r}", gone)]


def test_the_stand_in_keeps_its_own_monitor_whatever_the_clone_monitors(
    deleted: None, tmp_path: Path
) -> None:
    """A cloner's conf/train.yaml monitors what their module logs (val/mae, say): the stand-in
    logs val/acc, and a run on it must not be refused for the cloner's choice."""
    stand_in = harness.resolve(harness.DIGITS)
    assert stand_in is not None
    cfg = harness.compose(["monitor.metric=val/mae", "monitor.mode=min", *stand_in], tmp_path)
    assert (cfg.monitor.metric, cfg.monitor.mode) == ("val/acc", "max")
