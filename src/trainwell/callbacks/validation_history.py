"""ValidationHistory: every validation's logged `val*` values, so results.json can report the
epoch the best checkpoint holds.

`trainer.callback_metrics` after fit are the *last* validation's values, while `best.ckpt` (what
the test stage, predict and export use) is the monitored metric's best epoch: a run that printed
`val/mae=42.91` for its best epoch would report the 44.21 of its last. This callback keeps each
validation's values; `best_validation` picks the one the best checkpoint was saved from. The list
is run state that shapes results.json, so it goes into every checkpoint and comes back on resume.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint


def _is_validation_metric(name: str, monitor: str | None) -> bool:
    # What a validation loop logs by the usual names (val/acc, val_loss, valid/f1), and the
    # monitored metric whatever its name.
    return name == monitor or name.startswith(("val/", "val_", "valid"))


class ValidationHistory(L.Callback):
    """Always installed by the template: records each validation (not the sanity check) as
    `{"epoch", "step", "metrics"}`, in order. Lightning calls it before any checkpoint callback's
    `on_validation_end`, so a checkpoint written after a validation holds that validation."""

    def __init__(self, monitor: str | None = None) -> None:
        self.monitor = monitor
        self.entries: list[dict[str, Any]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {
            name: float(value)
            for name, value in trainer.callback_metrics.items()
            if value.numel() == 1 and _is_validation_metric(name, self.monitor)
        }
        entry = {"epoch": trainer.current_epoch, "step": trainer.global_step, "metrics": metrics}
        self.entries.append(entry)

    def state_dict(self) -> dict[str, Any]:
        return {"entries": [dict(e, metrics=dict(e["metrics"])) for e in self.entries]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.entries = [dict(e, metrics=dict(e["metrics"])) for e in state_dict.get("entries", [])]


def best_validation(
    history: ValidationHistory, trainer: L.Trainer
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the validation the best checkpoint was saved from, the last validation); either None
    when there is none. The best is the first validation whose monitored value is the best
    checkpoint's score: the checkpoint replaces its best only on a strict improvement, so an
    earlier equal value would itself have been the best."""
    last = history.entries[-1] if history.entries else None
    for callback in trainer.checkpoint_callbacks:
        if not isinstance(callback, ModelCheckpoint) or callback.monitor in (None, "step"):
            continue
        score = callback.best_model_score
        if score is None or not callback.best_model_path:
            return None, last
        target = float(score)
        for entry in history.entries:
            if entry["metrics"].get(callback.monitor) == target:
                return entry, last
        return None, last
    return None, last
