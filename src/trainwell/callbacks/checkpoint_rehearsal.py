"""CheckpointRehearsal: the run's checkpoint written and read back before its first training step.

A value a checkpoint cannot hold (a fitted scikit-learn scaler kept in a datamodule's
`state_dict()`, a dataclass in a callback's state) is otherwise found when the first checkpoint is
written, or worse when it is read: after the whole fit, at testing, resume, eval or export. Here the
checkpoint a later save writes (model, optimizer, schedulers, loops, datamodule, callback and
module state, hyper-parameters) is made through the same `trainer.save_checkpoint` and the same
writer, into memory (nothing reaches checkpoints/), and read back by the loader every reader uses;
a value that cannot be saved, or that reads back as another type or other bits, stops the run in
one line naming its key path and type (exit 2), on every rank.
"""

from __future__ import annotations

import lightning as L

from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_write import REHEARSAL, AtomicCheckpointIO, Rehearsal


class CheckpointRehearsal(L.Callback):
    """Always installed by the template; the doctor's checkpoint.roundtrip runs the same save."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rehearsal = rehearse(trainer)
        # Rank 0 writes (and so rehearses) the checkpoint: every rank stops with its line.
        error = None if rehearsal.error is None else str(rehearsal.error)
        error = trainer.strategy.broadcast(error, src=0)
        if error is not None:
            raise TrainwellError(f"{error}; stopped before the first training step")


def rehearse(trainer: L.Trainer, datamodule: L.LightningDataModule | None = None) -> Rehearsal:
    """The trainer's checkpoint saved into memory and read back: the outcome (rank 0's; every
    rank must call it, the save gathers state across ranks).

    `datamodule`: for a trainer fitted on loaders (the doctor's probes), the datamodule whose
    state a run's checkpoint holds, added as Lightning adds it (under its class name, when its
    state_dict() is not empty)."""
    writer = trainer.strategy.checkpoint_io
    if not isinstance(writer, AtomicCheckpointIO):
        return Rehearsal()  # a Trainer built outside the template: its saves are not trainwell's
    extra = {}
    if datamodule is not None and trainer.datamodule is None:
        state = datamodule.state_dict()
        if state:
            extra[type(datamodule).__qualname__] = state
    with writer.rehearsing(extra) as rehearsal:
        trainer.save_checkpoint(REHEARSAL, weights_only=False)  # full state, as every save
    return rehearsal
