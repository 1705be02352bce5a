"""A file that is not a checkpoint, or one cut short, is "not a readable checkpoint" naming what was
found (exit 2) in eval and in the converter, never the pickled-code advice or a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from tests.helpers.config import REPO
from tests.helpers.scripts import call_script, run_python
from trainwell.io.checkpoint_read import CheckpointError, load_checkpoint_file
from trainwell.io.hparams import main as convert


def _garbage(tmp_path: Path) -> Path:
    path = tmp_path / "x.ckpt"
    path.write_text("garbage\n")
    return path


def _cut_short(tmp_path: Path) -> Path:
    path = tmp_path / "cut.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize("make", [_garbage, _cut_short])
def test_the_loader_says_not_a_readable_checkpoint_and_what_it_found(make, tmp_path: Path) -> None:
    path = make(tmp_path)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint_file(path)
    message = str(err.value)
    assert f"checkpoint {path} is not a readable checkpoint" in message, message
    assert f"-byte file starting with {path.read_bytes()[:16]!r}" in message, message
    assert "pickled" not in message and "trainwell.io.hparams" not in message


def test_eval_of_a_garbage_file_is_one_line_exit_2(tmp_path: Path) -> None:
    path = _garbage(tmp_path)
    proc = call_script("eval.py", f"ckpt_path={path}", f"hydra.run.dir={tmp_path / 'eval'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: checkpoint") and "is not a readable checkpoint" in last
    assert "Traceback" not in proc.stderr and "pickled" not in proc.stderr


def _convert(*args: str) -> subprocess.CompletedProcess:
    """`python -m trainwell.io.hparams ARGS` as a user types it: a process of its own."""
    target = {"module": "trainwell.io.hparams"}
    return run_python(target, list(args), REPO, {**os.environ, "PYTHONUNBUFFERED": "1"}, 120)


def test_the_converter_gives_one_line_errors_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.ckpt"
    # One case through the module as a user runs it (its exit status reaches the shell), the
    # others through the same entry point in this process.
    proc = _convert(str(tmp_path / "missing.ckpt"), str(out))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "error: checkpoint not found" in proc.stderr
    assert not out.exists()
    for source, expected in (
        (_garbage(tmp_path), "is not a readable checkpoint (a 8-byte file"),
        (_cut_short(tmp_path), "is not a readable checkpoint"),
    ):
        capsys.readouterr()
        code = convert([str(source), str(out)])
        stderr = capsys.readouterr().err
        assert code == 2, stderr
        assert stderr.count("\n") == 1 and expected in stderr, stderr
        assert not out.exists()


def test_the_converter_help_says_what_it_does_and_that_it_unpickles(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        convert(["--help"])
    assert exit_.value.code == 0
    stdout = capsys.readouterr().out
    assert "weights_only=True" in stdout and "UNPICKLES its input" in stdout
    assert "only on files you trust" in stdout
