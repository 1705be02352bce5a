"""Bare Lightning: the same model, data path and precision as a trainwell run, through Lightning's
own Trainer with none of trainwell's callbacks, task or checkpoint IO.

It sits between the hand-written loop (benchmarks/raw_loop.py) and trainwell: raw -> bare is
Lightning's share of a gap, bare -> trainwell is ours. What it runs, built from the same config
as the other two sides (raw_loop.build_from_config: seed, datamodule and its loaders, net,
optimizer at the plan's LR and per-step schedule, precision, channels_last, compile):

* a LightningModule as a Lightning user writes it: cross-entropy on the net's logits, nothing
  logged in training, `val/loss` and `val/acc` logged per validation batch (Lightning averages
  them over the epoch, weighted by batch size);
* Lightning's ModelCheckpoint twice, the same policy as the other sides: `best.ckpt` when
  val/acc improved, `last.ckpt` after every epoch; written by Lightning's own checkpoint IO (on
  the training thread, no fsync);
* the CSV logger at trainwell's `trainer.log_every_n_steps`; no progress bar, no model summary,
  no sanity check; `accumulate_grad_batches` as configured (Lightning's own arithmetic).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import raw_loop
import torch
import torch.nn.functional as F
from fit_timer import FitTimer
from harness import timed
from torch import nn


class BareModule(L.LightningModule):
    """What a Lightning user writes around a net: its loss, its metrics, its optimizer."""

    def __init__(self, net: nn.Module, built: raw_loop.Built, label_smoothing: float) -> None:
        super().__init__()
        self.net = net
        self._built = built  # not an nn.Module: kept out of the module tree and the checkpoint
        self.label_smoothing = label_smoothing

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y, label_smoothing=self.label_smoothing)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        self.log("val/loss", loss, batch_size=y.shape[0])
        self.log("val/acc", (logits.argmax(1) == y).float().mean(), batch_size=y.shape[0])

    def configure_optimizers(self) -> Any:
        optimizer, scheduler = self._built.optimization(self.net.parameters())
        if scheduler is None:
            return optimizer
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def run_from_config(
    overrides: list[str],
    epochs: int,
    tmp: Path,
    device: torch.device | None = None,
    channels_last: bool = False,
    extra_callbacks: tuple[L.Callback, ...] = (),
) -> dict[str, Any]:
    """One fit of bare Lightning on what `train()` would build from `overrides`; FitTimer's
    figures (the same timer as the trainwell side). `extra_callbacks`: a benchmark's instruments."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    device = device or torch.device("cpu")
    built = raw_loop.build_from_config(overrides, epochs, tmp, device, channels_last)
    cfg = built.cfg
    directory = tmp / "bare"
    module = BareModule(built.net, built, float(cfg.model.label_smoothing))
    folder = directory / "checkpoints"
    checkpoints = [  # one file each, replaced in place (no best-v1.ckpt)
        ModelCheckpoint(
            folder, "best", monitor="val/acc", mode="max", enable_version_counter=False
        ),
        ModelCheckpoint(folder, "last", save_on_train_epoch_end=True, enable_version_counter=False),
    ]
    trainer = L.Trainer(
        accelerator=device.type, devices=1, precision=built.precision, max_epochs=epochs,
        accumulate_grad_batches=built.accumulate, num_sanity_val_steps=0,
        log_every_n_steps=int(cfg.trainer.log_every_n_steps),
        logger=CSVLogger(directory), callbacks=[FitTimer(), *checkpoints, *extra_callbacks],
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=directory,
    )  # fmt: skip
    FitTimer.last = {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    wall, _, _ = timed(lambda: trainer.fit(module, datamodule=built.datamodule))
    final = FitTimer.last["state_dict"]
    return {
        **FitTimer.last,
        "train_wall": wall,
        "val_loss": float(trainer.callback_metrics["val/loss"]),
        "net_state": {k[len("net.") :]: v for k, v in final.items() if k.startswith("net.")},
    }
