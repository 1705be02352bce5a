"""Each compat entry against the upstream behaviour it relies on: these fail when upstream changes.

(Tests of compat entries that other modules exercise end to end may live with those modules.)
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MeanMetric

from tests.conftest import quiet_trainer
from trainwell import compat


class _Logs(L.LightningModule):
    """Logs a plain per-batch mean with an explicit batch size, a torchmetrics object, and a
    plain tensor from an epoch-end hook."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.metric = MeanMetric()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        loss = self.layer(x).pow(2).mean()
        self.log("plain", torch.tensor(batch_idx + 1.0), on_step=False, on_epoch=True, batch_size=3)
        self.metric.update(loss.detach())
        self.log("metric", self.metric, on_epoch=True)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("epoch_end", torch.tensor(0.5), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Read(L.Callback):
    def __init__(self) -> None:
        self.after_batches: list[dict[str, compat.LoggedValue]] = []
        self.at_end: dict[str, compat.LoggedValue] = {}

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.after_batches.append({v.name: v for v in compat.logged_values(trainer)})

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.at_end = {v.name: v for v in compat.logged_values(trainer)}


def test_logged_values_reads_lightnings_result_collection() -> None:
    read = _Read()
    loader = DataLoader(TensorDataset(torch.randn(12, 2)), batch_size=4)
    quiet_trainer(max_epochs=1, callbacks=[read]).fit(_Logs(), loader)
    second = read.after_batches[1]["plain"]
    assert (second.hook, second.on_step, second.on_epoch, second.reduce) == (
        "training_step",
        False,
        True,
        "mean",
    )
    # a mean is kept as sum(value x batch_size) and sum(batch_size): values 1 and 2, weight 3
    assert (second.total, second.batch_sizes, second.is_metric) == (9.0, 6.0, False)
    assert read.after_batches[0]["metric"].is_metric
    assert read.after_batches[0]["metric"].batch_sizes is None
    epoch_end = read.at_end["epoch_end"]
    assert epoch_end.hook == "on_train_epoch_end" and not epoch_end.is_metric
    # One process: Lightning records sync_dist only when the run is distributed.
    assert epoch_end.sync_dist is False


def test_logged_values_is_empty_outside_a_running_loop() -> None:
    assert compat.logged_values(quiet_trainer()) == []
