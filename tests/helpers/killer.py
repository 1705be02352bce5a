"""A callback that SIGKILLs its own process at a chosen point, for the kill/resume tests.

Injected into a real `scripts/train.py` run through Hydra (`+callbacks.killer._target_=...`):
nothing is mocked, the process really dies mid-run and the next run really resumes.
"""

from __future__ import annotations

import json
import os
import signal
from io import BytesIO
from typing import IO, Any

import lightning as L

from trainwell.io.checkpoint_write import AtomicCheckpointIO


def _send(name: str, group: bool) -> None:
    sig = signal.Signals[name]
    if group:  # every DDP rank at once (the test starts the run in its own session)
        os.killpg(os.getpgid(0), sig)
    else:
        os.kill(os.getpid(), sig)


PHASES = ("batch_end", "backward", "save", "epoch_start", "train_end", "test_batch", "results")


class KillAt(L.Callback):
    """Send `signal` (SIGKILL by default; to the process group with group=true):
    phase=batch_end: after micro-batch `batch` (0-based over the run) ends (rank 0 only);
    phase=backward: inside that micro-batch's training step, before backward;
    phase=save: halfway through writing checkpoint number `batch` (0-based);
    phase=epoch_start: when training epoch `batch` starts (its predecessor's saves may still be queued);
    phase=train_end: after the last training step, before testing;
    phase=test_batch: after test batch `batch`;
    phase=results: halfway through writing results.json.
    flush=true (batch_end, epoch_start): first wait until the checkpoints saved so far are on
    disk, so the run resumes from a known one, not from whichever write beat the kill."""

    def __init__(
        self, batch: int, phase: str = "batch_end", signal: str = "SIGKILL", group: bool = False,
        flush: bool = False,
    ) -> None:  # fmt: skip
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase}")
        self.batch, self.phase, self.signal, self.group = batch, phase, signal, group
        self.flush = flush
        self._seen = 0
        self._saves = 0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.phase == "results" and stage == "fit":
            self._die_while_writing_results()
        if self.phase != "save":
            return
        io = trainer.strategy.checkpoint_io
        assert isinstance(io, AtomicCheckpointIO), type(io)
        real_write = io._write

        def write_then_die(checkpoint: dict[str, Any], file: IO[bytes]) -> None:
            if isinstance(file, BytesIO):  # the step-0 rehearsal, in memory: not a save on disk
                real_write(checkpoint, file)
                return
            if self._saves == self.batch:
                real_write(checkpoint, file)
                file.flush()
                file.truncate(file.tell() // 2)  # half a file on disk, then the kill
                file.flush()
                os.fsync(file.fileno())
                _send("SIGKILL", self.group)
            self._saves += 1
            real_write(checkpoint, file)

        io._write = write_then_die  # type: ignore[method-assign]

    def _die_while_writing_results(self) -> None:
        import trainwell.training.run as run

        def write_then_die(path: Any, payload: dict[str, Any]) -> None:
            text = json.dumps(payload)
            tmp = path.parent / ".results-killed.json"
            tmp.write_text(text[: len(text) // 2])  # half a file on disk, then the kill
            _send("SIGKILL", self.group)

        run.write_results = write_then_die  # type: ignore[assignment]

    def _flush(self, trainer: L.Trainer) -> None:
        if self.flush:
            io = trainer.strategy.checkpoint_io
            assert isinstance(io, AtomicCheckpointIO), type(io)
            io.flush()

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.phase == "epoch_start" and trainer.current_epoch == self.batch:
            self._flush(trainer)
            _send(self.signal, self.group)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.phase == "train_end":
            _send(self.signal, self.group)

    def on_test_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        if self.phase == "test_batch" and batch_idx == self.batch:
            _send(self.signal, self.group)

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Any
    ) -> None:
        if self.phase == "backward" and self._seen == self.batch:
            _send(self.signal, self.group)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        if self.phase == "batch_end" and self._seen == self.batch and trainer.is_global_zero:
            self._flush(trainer)
            _send(self.signal, self.group)
        self._seen += 1
