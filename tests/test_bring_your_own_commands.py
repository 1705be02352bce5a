"""The "Bring your own module" section of docs/your-project.md run with the page's own commands in
a clone (tests/test_bring_your_own.py writes the code; this file is apart so that pytest-xdist
can run it beside that one)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.test_bring_your_own import (
    RUN_DIR,
    USER,
    make_project,
    page_commands,
    run_in_clone,
    run_line,
)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory)


def _forked(project: Path, line: str) -> subprocess.CompletedProcess:
    """A page line `python scripts/<script> ...`, its argv as typed, run by `run_in_clone`."""
    python, script, *args = shlex.split(line, comments=True)
    assert python == "python" and script.startswith("scripts/"), line
    return run_in_clone(project, script.removeprefix("scripts/"), *args)


@pytest.mark.slow  # every line of the page, one after another: about a minute on 2 cores
def test_the_readme_commands_run_as_written_in_a_clone(project: Path) -> None:
    train, evaluate, doctor = page_commands()
    # The first line in a fresh process from a shell's argv, as the user's first command
    # (imports of the page's code included); the next two, as typed, in forks of the warm
    # interpreter with the same environment (test_startup.py starts every script fresh).
    proc = run_line(project, train)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(RUN_DIR.findall(proc.stdout)[-1])
    assert (run_dir / "results.json").is_file()
    best = run_dir / "checkpoints" / "best.ckpt"
    proc = _forked(project, evaluate.replace("<run dir>", str(run_dir)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "test/loss"
        in json.loads((Path(RUN_DIR.findall(proc.stdout)[-1]) / "results.json").read_text())[
            "metrics"
        ]
    )
    assert str(best) in evaluate.replace("<run dir>", str(run_dir))
    proc = _forked(project, doctor)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a check failed, still a report
    assert (
        '"checks"'
        in (Path(RUN_DIR.findall(proc.stdout)[-1]) / "doctor" / "report.json").read_text()
    )


BAD_DECLARATION = """
from project.lit import MyModule


class CountsNothing(MyModule):
    def loss_items(self, batch):
        return 0
"""


def test_a_bad_item_count_stops_the_run_in_one_line_writing_nothing(
    project: Path, tmp_path: Path
) -> None:
    (project / "src" / "project" / "bad.py").write_text(BAD_DECLARATION)
    run_dir = tmp_path / "run"
    proc = run_in_clone(project, "train.py", *USER, "model._target_=project.bad.CountsNothing",
                        "trainer.accumulate_grad_batches=2", f"hydra.run.dir={run_dir}")  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: CountsNothing.loss_items returned 0 for train micro-batch 0")
    assert not list(run_dir.glob("checkpoints/*.ckpt")) and not (run_dir / "results.json").exists()
