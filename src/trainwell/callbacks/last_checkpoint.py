"""checkpoints/last.ckpt: always the newest end-of-epoch (or end-of-training) state.

Lightning's own `save_last=True` (2.6) writes last.ckpt only together with a new best, so with
`save_top_k=1` it is a copy of the best epoch, not the newest (compat/checkpoints.py).
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from trainwell import compat


class LastCheckpoint(ModelCheckpoint):
    """`<dirpath>/last.ckpt`: always the newest end-of-epoch (or end-of-training) state."""

    def __init__(self, dirpath: str, filename: str = "last") -> None:
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            monitor=None,
            save_top_k=1,
            save_last=False,
            auto_insert_metric_name=False,
            enable_version_counter=False,
            # Left unset, Lightning 2.6.6 (ModelCheckpoint._should_save_on_train_epoch_end) saves
            # after each validation instead whenever check_val_every_n_epoch != 1 or
            # val_check_interval validates within epochs: no new last.ckpt for an epoch without
            # validation, and a mid-epoch state in it after a mid-epoch validation.
            save_on_train_epoch_end=True,
        )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Resumed from a checkpoint of finished training (a kill landed after best.ckpt but
        # before last.ckpt reached the disk), FitLoop.run skips training and no train hook runs:
        # last.ckpt would keep an older state while results.json names it the final one.
        if trainer.fast_dev_run or trainer.sanity_checking:
            return
        if trainer.global_step == compat.last_saved_step(self):
            return
        own_file = Path(self.dirpath or ".") / f"{self.filename}{self.FILE_EXTENSION}"
        resumed_from = trainer.ckpt_path
        if resumed_from and Path(resumed_from).resolve() == own_file.resolve():
            return  # last.ckpt already holds this state
        compat.save_unmonitored(self, trainer)
