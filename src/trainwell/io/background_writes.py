"""When AtomicCheckpointIO writes off the training thread: inside the training loop, and only there."""

from __future__ import annotations

import sys

import lightning as L

from trainwell.io.checkpoint_write import AtomicCheckpointIO


class BackgroundCheckpointWrites(L.Callback):
    """Background checkpoint writes during the training loop, and only there.

    From on_train_start to on_train_end the trainer's AtomicCheckpointIO writes off the training
    thread (ModelCheckpoint's saves, pre-emption); at on_train_end, on an exception and at the end
    of fit it waits for every pending write and goes back to writing before returning, so code
    that saves and then reads a file outside training (the doctor, a user after fit) finds it.
    The end-of-fit wait also covers Lightning 2.6's ModelParallelStrategy (trainer=fsdp), whose
    teardown does not call `checkpoint_io.teardown()`. After a crash the pending writes are still
    completed; a write failure is then printed rather than raised, so the error that crashed the
    run is the one reported.
    """

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _set_background(trainer, True)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _set_background(trainer, False)
        _flush(trainer)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _flush(trainer)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        _set_background(trainer, False)
        try:
            _flush(trainer)
        except Exception as err:  # reported, not raised: `exception` is the cause to report
            print(f"a checkpoint write failed as well: {err}", file=sys.stderr, flush=True)


def _set_background(trainer: L.Trainer, on: bool) -> None:
    io = trainer.strategy.checkpoint_io
    if isinstance(io, AtomicCheckpointIO):
        io.background = on


def _flush(trainer: L.Trainer) -> None:
    flush = getattr(trainer.strategy.checkpoint_io, "flush", None)
    if callable(flush):
        flush()
