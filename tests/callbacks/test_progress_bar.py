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

    def _read(self, where: str) -> None:
        self.seen.append((where, self.bar.train_progress_bar.completed))

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


def _fit(tmp_path: Any, **kwargs: Any) -> list[tuple[str, float]]:
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
    return probe.seen


def test_bar_is_current_at_validation_and_epoch_end(tmp_path: Any) -> None:
    seen = _fit(tmp_path, max_epochs=1, val_check_interval=7)
    assert seen == [("val", 7), ("val", 14), ("epoch_end", 20), ("train_end", 20)]


def test_bar_is_current_when_max_steps_stops_mid_epoch(tmp_path: Any) -> None:
    seen = _fit(tmp_path, max_steps=5, max_epochs=1, check_val_every_n_epoch=None,
                val_check_interval=1000)  # fmt: skip
    assert seen[-1] == ("train_end", 5)
