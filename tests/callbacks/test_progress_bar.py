"""The training bar is redrawn at most refresh_rate times per second, yet never lags behind
where the run is when validation starts, an epoch ends or training stops."""

from __future__ import annotations

from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from torch.utils.data import DataLoader, TensorDataset

from trainwell.callbacks import ThrottledProgressBar

pytestmark = pytest.mark.engine  # needs nothing of the examples


class BarProbe(L.Callback):
    """Runs after the bar (later in the callback list): what the bar shows at each point."""

    def __init__(self, bar: ThrottledProgressBar) -> None:
        self.bar = bar
        self.seen: list[tuple[str, float]] = []
        self.epochs: list[str] = []  # the bar's text at each epoch's end

    def _read(self, where: str) -> None:
        self.seen.append((where, self.bar.train_progress_bar.completed))
        if where == "epoch_end":
            self.epochs.append(self.bar.train_progress_bar.description.strip())

    def on_validation_start(self, trainer: L.Trainer, *args: Any) -> None:
        if not trainer.sanity_checking:
            self._read("val")

    def on_train_epoch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self._read("epoch_end")

    def on_train_end(self, trainer: L.Trainer, *args: Any) -> None:
        self._read("train_end")


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(40, 32)), batch_size=2)  # 20 batches


class Model(BoringModel):
    def train_dataloader(self) -> DataLoader:
        return _loader()

    def val_dataloader(self) -> DataLoader:
        return _loader()

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return super().training_step(batch[0], batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        return super().validation_step(batch[0], batch_idx)


def _fit(tmp_path: Any, **kwargs: Any) -> BarProbe:
    # refresh_rate=1: one update per second, so within this sub-second fit every update after
    # the first is throttled and only the flushes can bring the bar up to date.
    bar = ThrottledProgressBar(refresh_rate=1)
    probe = BarProbe(bar)
    trainer = L.Trainer(
        accelerator="cpu", callbacks=[bar, probe], logger=False, enable_checkpointing=False,
        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=1,
        default_root_dir=tmp_path, **kwargs,
    )  # fmt: skip
    trainer.fit(Model())
    return probe


def test_bar_is_current_at_validation_and_epoch_end(tmp_path: Any) -> None:
    seen = _fit(tmp_path, max_epochs=1, val_check_interval=7).seen
    assert seen == [("val", 7), ("val", 14), ("epoch_end", 20), ("train_end", 20)]


def test_bar_is_current_when_max_steps_stops_mid_epoch(tmp_path: Any) -> None:
    seen = _fit(tmp_path, max_steps=5, max_epochs=1, check_val_every_n_epoch=None,
                val_check_interval=1000).seen  # fmt: skip
    assert seen[-1] == ("train_end", 5)


def test_the_bar_counts_epochs_from_one_as_max_epochs_and_the_closing_line_do(
    tmp_path: Any,
) -> None:
    """`max_epochs=3` runs epochs 1, 2 and 3 of 3 (the closing line says "stopped after epoch 3
    of 3"); Lightning's own bar says Epoch 0/2 .. 2/2."""
    assert _fit(tmp_path, max_epochs=3).epochs == ["Epoch 1/3", "Epoch 2/3", "Epoch 3/3"]
