"""last.ckpt read while the run goes on, and at its end: always the newest end-of-epoch (or
end-of-training) state, never a copy of best.ckpt, whatever the monitored metric did.

The run's val/acc peaks at epoch 1 and falls afterwards (tests/helpers/scripted.py), so a
last.ckpt that followed the metric would hold epoch 1's state from then on.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
from omegaconf import open_dict

from tests.helpers.scripted import STEPS_PER_EPOCH, scripted_cfg, step_of
from trainwell.training.run import train


class ReadLastCheckpoint(L.Callback):
    """At the start of every epoch after the first, appends to `record` the global step
    last.ckpt holds (once the background writes queued so far reached the disk) and the
    trainer's."""

    def __init__(self, path: str, record: str) -> None:
        self.path, self.record = Path(path), Path(record)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == 0:
            return
        trainer.strategy.checkpoint_io.flush()
        with self.record.open("a") as f:
            f.write(f"{step_of(self.path)} {trainer.global_step}\n")


def test_last_ckpt_is_the_newest_epoch_at_every_epoch_while_training(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cfg = scripted_cfg(run_dir)
    with open_dict(cfg):
        cfg.callbacks.read_last = {
            "_target_": f"{__name__}.ReadLastCheckpoint",
            "path": str(run_dir / "checkpoints" / "last.ckpt"),
            "record": str(tmp_path / "seen.txt"),
        }
    train(cfg)
    seen = (tmp_path / "seen.txt").read_text().splitlines()
    assert seen == [f"{STEPS_PER_EPOCH * e} {STEPS_PER_EPOCH * e}" for e in (1, 2, 3)]
    assert step_of(run_dir / "checkpoints" / "best.ckpt") == 2 * STEPS_PER_EPOCH


def test_last_ckpt_is_written_when_training_ends_between_validations(tmp_path: Path) -> None:
    # Validation only after odd epochs. The run is continued from its last.ckpt of epoch 1 for
    # one more epoch, which ends without a validation: last.ckpt must still hold that epoch's
    # state (written at the end of every epoch, validated or not).
    run_dir = tmp_path / "run"
    every_2 = "trainer.check_val_every_n_epoch=2"
    train(scripted_cfg(run_dir, "trainer.max_epochs=2", every_2))
    assert step_of(run_dir / "checkpoints" / "last.ckpt") == 2 * STEPS_PER_EPOCH
    train(scripted_cfg(run_dir, "trainer.max_epochs=3", every_2, "resume=auto"))
    assert step_of(run_dir / "checkpoints" / "last.ckpt") == 3 * STEPS_PER_EPOCH


def test_last_ckpt_is_written_after_a_resume_from_finished_training(tmp_path: Path) -> None:
    # A kill after best.ckpt of the final epoch reached the disk, before last.ckpt (and
    # results.json) did: the relaunch resumes from best.ckpt, trains nothing, and last.ckpt must
    # still end up holding the final state.
    run_dir = tmp_path / "run"
    train(scripted_cfg(run_dir, "trainer.max_epochs=2"))
    ckpts = run_dir / "checkpoints"
    final = 2 * STEPS_PER_EPOCH
    assert step_of(ckpts / "best.ckpt") == final  # val/acc still rising at the last epoch
    (ckpts / "last.ckpt").unlink()
    (run_dir / "results.json").unlink()
    results = train(scripted_cfg(run_dir, "trainer.max_epochs=2", "resume=auto"))
    assert step_of(ckpts / "last.ckpt") == final
    assert results["last_ckpt"] == str(ckpts / "last.ckpt")
