"""Checkpoints written off the training thread are on disk when the training loop ends, not only
once the run is torn down (the trainer's teardown waits for the writes too, later): a module's
own on_train_end, and code after fit, read them.

The writes are slowed down (0.5 s each) so that a missing flush cannot hide behind a fast disk."""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any

import lightning as L
from omegaconf import open_dict

from tests.helpers.scripted import STEPS_PER_EPOCH, ScriptedValAcc, scripted_cfg, step_of
from trainwell.io.checkpoint_write import AtomicCheckpointIO
from trainwell.training.run import train


class SlowWrites(L.Callback):
    """Every checkpoint write of the run waits 0.5 s before it starts."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        io = trainer.strategy.checkpoint_io
        assert isinstance(io, AtomicCheckpointIO), type(io)
        real_write = io._write

        def slow_write(checkpoint: dict[str, Any], file: IO[bytes]) -> None:
            time.sleep(0.5)
            real_write(checkpoint, file)

        io._write = slow_write  # type: ignore[method-assign]


class ReadsCheckpointsAtTrainEnd(ScriptedValAcc):
    """The module's on_train_end (Lightning calls it after every callback's on_train_end, before
    teardown) records the global step best.ckpt and last.ckpt hold, or `missing`."""

    def __init__(self, dirpath: str, record: str) -> None:
        super().__init__()
        self.dirpath, self.record = Path(dirpath), Path(record)

    def on_train_end(self) -> None:
        seen = []
        for name in ("best.ckpt", "last.ckpt"):
            path = self.dirpath / name
            seen.append(f"{name} {step_of(path) if path.is_file() else 'missing'}")
        self.record.write_text(f"{self.trainer.global_step}: " + ", ".join(seen))


def test_checkpoints_are_on_disk_when_training_ends(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cfg = scripted_cfg(run_dir, "trainer.max_epochs=2")  # val/acc improves: best = last
    with open_dict(cfg):
        cfg.callbacks.slow_writes = {"_target_": f"{__name__}.SlowWrites"}
        cfg.model = {
            "_target_": f"{__name__}.ReadsCheckpointsAtTrainEnd",
            "dirpath": str(run_dir / "checkpoints"),
            "record": str(tmp_path / "seen.txt"),
        }
    train(cfg)
    final = 2 * STEPS_PER_EPOCH
    assert (tmp_path / "seen.txt").read_text() == f"{final}: best.ckpt {final}, last.ckpt {final}"
