"""A run's life around its training steps: last.ckpt, resumed results, a completed run relaunched,
a fresh start over another run, leftovers of killed writes, runs without a logger."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.helpers.config import compose_config
from tests.helpers.scripted import scripted_cfg, step_of
from tests.helpers.scripts import call_script
from trainwell.training.run import train


def test_last_ckpt_is_the_newest_epoch_and_best_the_best(tmp_path: Path) -> None:
    results = train(scripted_cfg(tmp_path / "run"))
    ckpts = tmp_path / "run" / "checkpoints"
    assert step_of(ckpts / "best.ckpt") == 2 * 4  # end of epoch 1 (4 steps per epoch)
    assert step_of(ckpts / "last.ckpt") == 4 * 4  # end of epoch 3, although val/acc fell
    assert results["last_ckpt"] == str(ckpts / "last.ckpt")
    assert results["best_ckpt"] == str(ckpts / "best.ckpt")


def test_last_ckpt_follows_a_max_steps_end_mid_epoch(tmp_path: Path) -> None:
    train(scripted_cfg(tmp_path / "run", "trainer.max_steps=6"))
    assert step_of(tmp_path / "run" / "checkpoints" / "last.ckpt") == 6


def _sha(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def test_fresh_start_over_another_runs_checkpoints_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(scripted_cfg(run_dir, "trainer.max_epochs=1"))
    before = _sha(run_dir / "checkpoints")
    proc = call_script("train.py", "trainer.max_epochs=1", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert line == (
        f"error: {run_dir} already holds checkpoints of a run; continue it with resume=auto, or "
        "start a new run with hydra.run.dir=<empty dir>"
    )
    assert _sha(run_dir / "checkpoints") == before  # nothing touched


def test_leftovers_of_interrupted_writes_are_removed_at_start(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(scripted_cfg(run_dir, "trainer.max_epochs=1"))
    ckpts = run_dir / "checkpoints"
    stale = [ckpts / ".last.ckpt.4242.tmp", run_dir / ".results-abc.json"]
    for path in stale:
        path.write_bytes(b"half a file")
    train(scripted_cfg(run_dir, "trainer.max_epochs=2", "resume=auto"))
    assert not any(p.exists() for p in stale)


def test_completed_run_relaunched_with_resume_auto_does_not_train_again(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = train(scripted_cfg(run_dir, "trainer.max_epochs=2"))
    before = _sha(run_dir / "checkpoints")
    again = train(scripted_cfg(run_dir, "trainer.max_epochs=2", "resume=auto"))
    assert again == first
    assert _sha(run_dir / "checkpoints") == before  # no step was trained, nothing rewritten
    # Asking for a longer run continues it instead.
    longer = train(scripted_cfg(run_dir, "trainer.max_epochs=3", "resume=auto"))
    assert longer["finished_at"]["global_step"] == 3 * 4


@pytest.mark.parametrize("logger", ["[]", "null"])
def test_runs_without_a_logger_leave_the_logging_callbacks_out(tmp_path: Path, logger: str) -> None:
    proc = call_script(
        "train.py",
        f"logger={logger}",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=4",
        "trainer.limit_val_batches=2",
        "trainer.limit_test_batches=2",
        "model.net.width=8",
        "print_config=false",
        f"hydra.run.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "callbacks.lr_monitor left out: it writes to a logger and this run has none" in (
        proc.stdout + proc.stderr
    )
    assert "test/acc" in json.loads((tmp_path / "results.json").read_text())["metrics"]


def test_multirun_without_a_logger_writes_one_results_per_job(tmp_path: Path) -> None:
    proc = call_script(
        "train.py",
        "-m",
        "logger=[]",
        "seed=1,2",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=4",
        "trainer.limit_val_batches=2",
        "trainer.limit_test_batches=2",
        "model.net.width=8",
        "print_config=false",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.parent.name for p in tmp_path.glob("*/results.json")) == ["0", "1"]


def test_an_unknown_monitored_metric_is_named(tmp_path: Path) -> None:
    """The monitored metric is the user's to choose; one the module never logs is named."""
    cfg = scripted_cfg(tmp_path / "run", "trainer.max_epochs=1", "monitor.metric=val/nope")
    with pytest.raises(Exception, match="val/nope"):
        train(cfg)


def test_trainer_knobs_need_no_plus(tmp_path: Path) -> None:
    cfg = compose_config(
        [
            "trainer.val_check_interval=5",
            "trainer.limit_train_batches=3",
            "trainer.limit_val_batches=2",
            "trainer.limit_test_batches=1",
            "trainer.gradient_clip_val=1.0",
            "trainer.check_val_every_n_epoch=1",
        ],
        tmp_path,
    )
    assert cfg.trainer.limit_train_batches == 3 and cfg.trainer.gradient_clip_val == 1.0
    assert cfg.trainer.val_check_interval == 5 and cfg.trainer.limit_test_batches == 1
