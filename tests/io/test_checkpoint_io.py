"""AtomicCheckpointIO's background writes: a save returns after a snapshot, the file lands later,
in order, atomically; a failure stops everything queued behind it and surfaces in the caller.

The writer is held at a gate (through the `_write` seam the kill tests use too), so each ordering
below is forced, not hoped for.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import IO, Any

import pytest
import torch

from tests.helpers.state import load_checkpoint
from trainwell.io.checkpoint_read import CheckpointError
from trainwell.io.checkpoint_write import AtomicCheckpointIO

pytestmark = pytest.mark.engine  # needs nothing of the examples


class GatedIO(AtomicCheckpointIO):
    """Writes wait at `gate` until the test opens it; counts concurrent writes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(background=True, **kwargs)
        self.gate = threading.Event()
        self.started = threading.Event()
        self.active = 0
        self.most_active = 0
        self.fail_next: OSError | None = None

    def _write(self, checkpoint: dict[str, Any], file: IO[bytes]) -> None:
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        self.started.set()
        try:
            assert self.gate.wait(timeout=30), "the test never opened the gate"
            if self.fail_next is not None:
                error, self.fail_next = self.fail_next, None
                raise error
            super()._write(checkpoint, file)
        finally:
            self.active -= 1


def state(value: float) -> dict[str, Any]:
    return {"state_dict": {"w": torch.full((4,), value)}, "global_step": int(value)}


def written_then_gated(tmp_path: Path) -> tuple[GatedIO, Path]:
    """An IO that has step-1.ckpt on disk and now holds every further write at its gate."""
    io = GatedIO(max_pending=8)
    old = tmp_path / "step-1.ckpt"
    io.gate.set()
    io.save_checkpoint(state(1.0), old)
    io.flush()
    io.gate.clear()
    return io, old


def test_save_returns_before_the_write_and_the_file_holds_the_state_at_save_time(
    tmp_path: Path,
) -> None:
    io = GatedIO()
    checkpoint = state(1.0)
    io.save_checkpoint(checkpoint, tmp_path / "last.ckpt")
    assert io.started.wait(timeout=30) and not (tmp_path / "last.ckpt").exists()  # not yet
    checkpoint["state_dict"]["w"].add_(100.0)  # the next optimizer step, in place
    checkpoint["global_step"] = 99
    io.gate.set()
    io.flush()
    got = load_checkpoint(tmp_path / "last.ckpt")
    assert torch.equal(got["state_dict"]["w"], torch.full((4,), 1.0)) and got["global_step"] == 1
    assert not list(tmp_path.glob(".*.tmp"))
    io.teardown()


def test_one_write_at_a_time_in_order_and_removal_only_after_the_newer_file(
    tmp_path: Path,
) -> None:
    io, old = written_then_gated(tmp_path)
    # ModelCheckpoint's order: save the new top-k file, then remove the previous one.
    for step in (2, 3, 4):
        io.save_checkpoint(state(float(step)), tmp_path / "last.ckpt")
    io.save_checkpoint(state(5.0), tmp_path / "step-5.ckpt")
    io.remove_checkpoint(old)
    assert old.exists()  # the newer file is not on disk yet, so the old one stays
    io.gate.set()
    io.flush()
    assert not old.exists() and load_checkpoint(tmp_path / "step-5.ckpt")["global_step"] == 5
    assert load_checkpoint(tmp_path / "last.ckpt")["global_step"] == 4  # the last save wins
    assert io.most_active == 1
    io.teardown()


def test_a_failed_write_stops_the_queue_and_surfaces_in_the_training_thread(
    tmp_path: Path,
) -> None:
    io, old = written_then_gated(tmp_path)
    io.fail_next = OSError(errno.ENOSPC, "No space left on device")
    io.save_checkpoint(state(2.0), tmp_path / "step-2.ckpt")
    io.remove_checkpoint(old)
    io.save_checkpoint(state(3.0), tmp_path / "last.ckpt")
    io.gate.set()
    with pytest.raises(CheckpointError, match="no space left on device while writing"):
        io.flush()
    assert (
        load_checkpoint(old)["global_step"] == 1
    )  # the removal queued behind the failure never ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-1.ckpt"]  # no temp file either
    io.flush()  # reported once; the writer works again
    io.save_checkpoint(state(4.0), tmp_path / "last.ckpt")
    io.teardown()  # teardown waits for it
    assert load_checkpoint(tmp_path / "last.ckpt")["global_step"] == 4


def test_at_most_max_pending_snapshots_wait(tmp_path: Path) -> None:
    io = GatedIO(max_pending=1)
    io.save_checkpoint(state(1.0), tmp_path / "a.ckpt")
    assert io.started.wait(timeout=30)
    second = threading.Thread(target=io.save_checkpoint, args=(state(2.0), tmp_path / "b.ckpt"))
    second.start()
    second.join(timeout=0.5)
    assert second.is_alive()  # waits for the first write: no second snapshot in memory
    io.gate.set()
    second.join(timeout=30)
    assert not second.is_alive()
    io.teardown()
    assert load_checkpoint(tmp_path / "b.ckpt")["global_step"] == 2


def test_synchronous_mode_writes_before_returning(tmp_path: Path) -> None:
    io = AtomicCheckpointIO(background=False)
    io.save_checkpoint(state(1.0), tmp_path / "last.ckpt")
    assert load_checkpoint(tmp_path / "last.ckpt")["global_step"] == 1
    io.remove_checkpoint(tmp_path / "last.ckpt")
    assert not (tmp_path / "last.ckpt").exists()


class _DiskFillsUp(AtomicCheckpointIO):
    """The file accepts `room` bytes, then fails as a full disk does."""

    def __init__(self, room: int) -> None:
        super().__init__(background=False)
        self.room = room

    def _write(self, checkpoint: dict[str, Any], file: IO[bytes]) -> None:
        io = self

        class Full:
            def write(self, data: Any) -> int:
                size = memoryview(data).nbytes
                if size > io.room:
                    raise OSError(errno.ENOSPC, "No space left on device")
                io.room -= size
                return file.write(data)

            def flush(self) -> None:
                file.flush()

        super()._write(checkpoint, Full())  # type: ignore[arg-type]


def test_a_full_disk_mid_stream_is_named_and_leaves_no_temp_file(tmp_path: Path) -> None:
    """torch.save itself turns the failed write into "unexpected pos"; the cause survives."""
    big = {"state_dict": {"w": torch.zeros(100_000)}}
    with pytest.raises(CheckpointError, match="no space left on device while writing"):
        _DiskFillsUp(room=50_000).save_checkpoint(big, tmp_path / "last.ckpt")
    assert list(tmp_path.iterdir()) == []


def test_background_during_the_training_loop_only(tmp_path: Path) -> None:
    """In a real fit: ModelCheckpoint's saves go to the writer thread; after fit a
    save-then-read (what the doctor and users do) finds the file."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    from tests.helpers.trainers import quiet_trainer
    from trainwell.io.background_writes import BackgroundCheckpointWrites

    class Probe(L.Callback):
        seen: list[bool] = []

        def on_train_batch_end(self, trainer, *args: Any) -> None:
            self.seen.append(trainer.strategy.checkpoint_io.background)

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def training_step(self, batch, batch_idx):
            return (self.w * batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    io = AtomicCheckpointIO()
    probe = Probe()
    every_step = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1)
    trainer = quiet_trainer(
        max_epochs=1,
        plugins=[io],
        enable_checkpointing=True,
        callbacks=[BackgroundCheckpointWrites(), probe, every_step],
    )
    trainer.fit(Tiny(), DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2))
    assert probe.seen == [True, True] and not io.background
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) == 2  # flushed at the end of training
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    assert (
        load_checkpoint(tmp_path / "after.ckpt")["global_step"] == 2
    )  # written before the call returned
