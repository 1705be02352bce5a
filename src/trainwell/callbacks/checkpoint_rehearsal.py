"""CheckpointRehearsal: the run's checkpoint written and read back before its first training step.

A value a checkpoint cannot hold (a fitted scikit-learn scaler kept in a datamodule's
`state_dict()`, a dataclass in a callback's state) is otherwise found when the first checkpoint is
written, or worse when it is read: after the whole fit, at testing, resume, eval or export. Here the
checkpoint a later save writes (model, optimizer, schedulers, loops, datamodule, callback and
module state, hyper-parameters) is made through the same `trainer.save_checkpoint` and the same
writer, into memory (nothing reaches checkpoints/), and read back by the loader every reader uses;
a value that cannot be saved, or that reads back as another type or other bits, stops the run in
one line naming its key path and type (exit 2): every rank stops, rank 0 prints the line.

Tensors always save; what can fail is the rest. So the tensors (weights, optimizer moments, a
numpy array's data) go through the round trip as stand-ins of their dtype and shape, and the
check costs the memory and time of the checkpoint's non-tensor state, not of its weights
(benchmarks/features.py state measures it on a large model).
"""

from __future__ import annotations

import lightning as L

from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_write import REHEARSAL, AtomicCheckpointIO, Rehearsal


class CheckpointRehearsal(L.Callback):
    """Always installed by the template; the doctor's checkpoint.roundtrip runs the same save."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rehearsal = rehearse(trainer, payloads=False)
        # Rank 0 writes (and so rehearses) the checkpoint: every rank stops, rank 0 says why.
        error = None if rehearsal.error is None else str(rehearsal.error)
        error = trainer.strategy.broadcast(error, src=0)
        if error is not None:
            stop = TrainwellError(f"{error}; stopped before the first training step")
            stop.silent = trainer.global_rank != 0  # cli.py prints it once per run
            raise stop


def rehearse(
    trainer: L.Trainer, datamodule: L.LightningDataModule | None = None, payloads: bool = True
) -> Rehearsal:
    """The trainer's checkpoint saved into memory and read back: the outcome (rank 0's; every
    rank must call it, the save gathers state across ranks).

    `datamodule`: for a trainer fitted on other data (the doctor's probes: their loaders, in a
    stand-in datamodule with no state), the datamodule whose state a run's checkpoint holds,
    added as Lightning adds it (under its class name, when its state_dict() is not empty). `payloads=False`: tensors travel as stand-ins of their dtype and
    shape (the run's check; the doctor loads the weights it reads back, so it keeps them)."""
    writer = trainer.strategy.checkpoint_io
    if not isinstance(writer, AtomicCheckpointIO):
        return Rehearsal()  # a Trainer built outside the template: its saves are not trainwell's
    extra = {}
    if datamodule is not None and trainer.datamodule is not datamodule:
        state = datamodule.state_dict()
        if state:
            extra[type(datamodule).__qualname__] = state
    with writer.rehearsing(extra, payloads) as rehearsal:
        trainer.save_checkpoint(REHEARSAL, weights_only=False)  # full state, as every save
    return rehearsal
