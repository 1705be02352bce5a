"""Bad input: exit non-zero with one line naming cause and fix, and leave every checkpoint as it was.

Each case runs the real scripts/train.py against a copy of a trained run dir (best, last and a
step checkpoint in it) and compares the SHA-256 of every checkpoint file before and after.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.scripts import run_script
from tests.helpers.suggestions import after, applied, overrides_in

pytestmark = pytest.mark.slow  # ~10 real subprocess runs

QUIET = [
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
]
TRAINED = [*QUIET, "data.batch_size=64", "trainer.max_epochs=1", "test=false"]
TINY_RESNET = ["data=synthetic", "model=resnet18", "model.net.width=8", *QUIET]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    steps = "callbacks.step_checkpoint.every_n_train_steps=5"
    proc = run_script("train.py", *TRAINED, steps, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.fixture
def run_dir(trained_run: Path, tmp_path: Path) -> Iterator[Path]:
    """A private copy of the trained run; on exit, asserts its checkpoints are byte-identical."""
    copy = tmp_path / "run"
    shutil.copytree(trained_run, copy)
    before = checkpoint_hashes(copy)
    # 20 optimizer steps: step checkpoints at 5, 10, 15 (the newest kept), none at the epoch's
    # last step (last.ckpt is written right after it).
    assert {"best.ckpt", "last.ckpt", "step-0000015.ckpt"} <= before.keys(), before
    yield copy
    after = checkpoint_hashes(copy)
    assert {k: after.get(k) for k in before} == before


def checkpoint_hashes(run_dir: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (run_dir / "checkpoints").glob("*.ckpt")
    }


def error_line(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), proc.stderr[-3000:]
    return last


def test_typo_override_suggests_the_nearest_key(run_dir: Path) -> None:
    proc = run_script("train.py", "resume=auto", "trainer.max_epoch=3", f"hydra.run.dir={run_dir}")
    line = error_line(proc)
    assert "did you mean 'trainer.max_epochs'?" in line
    key = after(line, "did you mean").split("'")[1]
    same = shutil.copytree(run_dir, run_dir.parent / "same")  # the fixture's copy stays as it was
    fixed = applied(["resume=auto", f"hydra.run.dir={same}"], f"{key}=2")
    proc = run_script("train.py", *fixed)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.example("project.models.resnet")
def test_unknown_config_group_option_lists_the_options(run_dir: Path) -> None:
    proc = run_script("train.py", "resume=auto", "model=resnet", f"hydra.run.dir={run_dir}")
    line = error_line(proc)
    assert "unknown model config 'resnet'; did you mean model=resnet18?" in line, line


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Path]:
    """A new run dir for bad data (a fresh start over a trained run dir is refused before any
    data is read): the failed run must leave no checkpoint behind."""
    path = tmp_path / "fresh"
    yield path
    assert not list(path.glob("checkpoints/*.ckpt"))


@pytest.mark.example("project.data.cifar10")
def test_missing_dataset_dir_names_the_dir_and_the_download_switch(
    fresh: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-dir"
    proc = run_script(
        "train.py", "data=cifar10", f"data.data_dir={missing}", *QUIET, f"hydra.run.dir={fresh}"
    )
    line = error_line(proc)
    assert "CIFAR-10 not found" in line and str(missing) in line and "data.download=true" in line


def test_corrupt_checkpoint_is_refused_in_one_line(run_dir: Path) -> None:
    corrupt = run_dir / "checkpoints" / "truncated.ckpt"
    data = (run_dir / "checkpoints" / "last.ckpt").read_bytes()
    corrupt.write_bytes(data[: len(data) // 2])
    proc = run_script("train.py", *TRAINED, f"ckpt_path={corrupt}", f"hydra.run.dir={run_dir}")
    line = error_line(proc)
    assert (
        f"checkpoint {corrupt} is not a readable checkpoint (corrupt or truncated" in line
        and "resume=auto" in line
    )


def test_checkpoint_of_another_architecture_lists_the_mismatched_keys(run_dir: Path) -> None:
    last = run_dir / "checkpoints" / "last.ckpt"
    proc = run_script(
        "train.py", *TRAINED, "model.net.width=16", f"ckpt_path={last}", f"hydra.run.dir={run_dir}"
    )
    line = error_line(proc)
    assert "is from a different architecture" in line, line
    assert "shape: net." in line and "->" in line, line  # names keys and both shapes
    # "resume with the model config it was trained with": the width override dropped, the
    # same command resumes from that checkpoint (the run dir's own config is the trained one).
    assert "resume with the model config it was trained with" in line
    same = shutil.copytree(run_dir, run_dir.parent / "same")  # the fixture's copy stays as it was
    resumed = f"ckpt_path={same / 'checkpoints' / 'last.ckpt'}"
    again = [*TRAINED, "trainer.max_epochs=2", resumed, f"hydra.run.dir={same}"]
    proc = run_script("train.py", *again)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_changed_effective_batch_is_refused_with_the_explanation(run_dir: Path) -> None:
    overrides = [*TRAINED, "trainer.max_epochs=2", "data.batch_size=32", "resume=auto"]
    proc = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}")
    line = error_line(proc)
    assert "effective batch changed on resume: 64 (64x1x1, micro x accumulate x world)" in line
    assert "32 (32x1x1) now" in line, line
    assert "resume_allow_batch_change=true" in line


@pytest.mark.example("project.data.synthetic", "project.models.resnet")
def test_empty_validation_split_is_named(fresh: Path) -> None:
    overrides = [*TINY_RESNET, "data.num_samples=64", "data.num_val=0", "trainer.max_epochs=1"]
    proc = run_script("train.py", *overrides, f"hydra.run.dir={fresh}")
    assert "the val split of SyntheticDataModule is empty" in error_line(proc)


@pytest.mark.example("project.data.synthetic", "project.models.resnet")
def test_batch_larger_than_dataset_with_drop_last(fresh: Path) -> None:
    overrides = [*TINY_RESNET, "data.num_samples=16", "data.batch_size=32", "data.drop_last=true"]
    proc = run_script("train.py", *overrides, f"hydra.run.dir={fresh}")
    line = error_line(proc)
    assert "data.batch_size=32 is larger than the 16-sample train split" in line, line


@pytest.mark.example("project.data.synthetic", "project.models.resnet")
def test_nan_batch_stops_at_the_first_bad_batch(fresh: Path) -> None:
    overrides = [*TINY_RESNET, "data.num_samples=64", "data.noise=nan", "trainer.max_epochs=1"]
    proc = run_script("train.py", *overrides, f"hydra.run.dir={fresh}")
    line = error_line(proc, code=1)  # the doctor's guard: a crash (1), not a config error (2)
    assert "NonFiniteLossError: non-finite" in line and "batch 0" in line, line
    assert "scripts/doctor.py" in line  # the fix it names


def test_disk_full_during_a_checkpoint_save(run_dir: Path, tmp_path: Path) -> None:
    """A real ENOSPC: the run dir lives on a tmpfs with room for the old checkpoints only."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    used = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
    size_kb = used // 1024 + 256  # < one more 1.1 MB digits checkpoint
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {mounted.stderr.strip()}")
    try:
        small = mount / "run"
        shutil.copytree(run_dir, small)
        before = checkpoint_hashes(small)
        overrides = [*TRAINED, "trainer.max_epochs=2", "resume=auto"]
        steps = "callbacks.step_checkpoint.every_n_train_steps=1"
        proc = run_script("train.py", *overrides, steps, f"hydra.run.dir={small}")
        line = error_line(proc)
        assert "no space left on device while writing" in line, line
        assert "previous checkpoints are intact" in line
        assert checkpoint_hashes(small) == before
        assert not list((small / "checkpoints").glob(".*.tmp"))  # the failed temp file is gone
        # As the line says: the run dir moved to a larger disk, hydra.run.dir pointed at it,
        # then resume=auto: the run continues from the intact checkpoints.
        assert "move the run dir to a larger disk and point hydra.run.dir at it" in line, line
        (continued,) = overrides_in(after(line, "; then"))
        larger = tmp_path / "larger" / "run"
        shutil.copytree(small, larger)
        again = [*TRAINED, "trainer.max_epochs=2", continued, steps, f"hydra.run.dir={larger}"]
        proc = run_script("train.py", *again)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"resume=auto: resuming from {larger / 'checkpoints'}" in proc.stdout
    finally:
        subprocess.run(["umount", str(mount)], check=True)
