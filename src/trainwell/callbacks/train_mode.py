"""TrainModeGuard: every training epoch starts with the whole task in train mode.

Custom validation code that calls .eval() would otherwise freeze BatchNorm and dropout silently.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L


class TrainModeGuard(L.Callback):
    """Stops the run when a module is in eval mode at the start of a training epoch.

    `allow_eval` lists module-name prefixes that are deliberately kept in eval (a frozen
    backbone whose BatchNorm statistics must not move).
    """

    def __init__(self, allow_eval: Sequence[str] = ()) -> None:
        super().__init__()
        self.allow_eval = tuple(allow_eval)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        off = [
            name or "task"
            for name, m in pl_module.named_modules()
            if not m.training and not (name and name.startswith(self.allow_eval))
        ]
        if off:
            raise RuntimeError(
                f"{len(off)} module(s) are in eval mode at the start of training epoch "
                f"{trainer.current_epoch} (first: `{off[0]}`), so BatchNorm and dropout run in "
                "inference mode while training; remove the stray .eval() or list the module in "
                "callbacks.train_mode_guard.allow_eval"
            )
