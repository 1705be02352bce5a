"""An epoch's checkpoints are written while the next epoch trains: in a real run, with the
writer held back until the training thread has taken three more steps, the run goes on and the
files then hold the state of the epoch that wrote them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import IO, Any

import lightning as L
import pytest
from omegaconf import open_dict

from tests.helpers.config import OWNED, QUIET_RUN, compose_config
from tests.helpers.state import load_checkpoint
from trainwell.io.checkpoint_write import AtomicCheckpointIO
from trainwell.training.run import train

GATE = threading.Event()
STEPPED: list[tuple[int, int, bool]] = []  # (epoch, batch, last.ckpt on disk) while held
HELD = (".last.ckpt", ".best.ckpt")  # the epoch's checkpoints (temp names); others pass


class StepsWhileHeld(L.Callback):
    """Three steps into the second epoch, notes whether last.ckpt reached the disk, then lets
    the held writer go."""

    steps_per_epoch = 0

    def __init__(self, last: str) -> None:
        self.last = Path(last)

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        batch_idx = args[-1]
        StepsWhileHeld.steps_per_epoch = trainer.num_training_batches
        if trainer.current_epoch == 1 and batch_idx < 3:
            STEPPED.append((trainer.current_epoch, batch_idx, self.last.exists()))
            if batch_idx == 2:
                GATE.set()


def test_the_next_epoch_trains_while_the_checkpoints_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = AtomicCheckpointIO._write

    def held_write(self: AtomicCheckpointIO, checkpoint: dict[str, Any], file: IO[bytes]) -> None:
        # A save that waits for its write never sees the gate open: the write then fails here
        # and the run with it.
        if Path(str(getattr(file, "name", ""))).name.startswith(HELD):
            assert GATE.wait(timeout=20), "the training thread waited for the checkpoint write"
        write(self, checkpoint, file)

    monkeypatch.setattr(AtomicCheckpointIO, "_write", held_write)
    GATE.clear()
    STEPPED.clear()
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    cfg = compose_config(
        [*OWNED, *QUIET_RUN, "trainer.max_epochs=2", "data.batch_size=128", "test=false"],
        run_dir,
    )
    with open_dict(cfg):
        cfg.callbacks.held = {"_target_": f"{__name__}.StepsWhileHeld", "last": str(last)}
    train(cfg)
    assert STEPPED == [(1, 0, False), (1, 1, False), (1, 2, False)]
    steps_per_epoch = StepsWhileHeld.steps_per_epoch
    assert load_checkpoint(last)["global_step"] == 2 * steps_per_epoch  # the final epoch's
    best = load_checkpoint(run_dir / "checkpoints" / "best.ckpt")["global_step"]
    assert best in (steps_per_epoch, 2 * steps_per_epoch)
