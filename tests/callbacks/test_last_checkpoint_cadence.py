"""last.ckpt is the newest end-of-epoch state after every epoch, however often validation runs:
every N epochs, never (no batches, no validation_step, no val_dataloader), or mid-epoch.

A run of 4 epochs x 4 optimizer steps (tests/helpers/scripted.py) reads last.ckpt before every
training batch (in epoch e >= 1 it must hold the end of epoch e - 1; in epoch 0 it must not exist
yet) and when the fit ends (the end of the last epoch).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf, open_dict

from tests.helpers.scripted import STEPS_PER_EPOCH, scripted_cfg, step_of
from tests.helpers.state import assert_bitwise_equal, final_state
from trainwell.training.run import train

EPOCHS = 4


def _held(path: Path) -> list[int] | None:
    """[global_step, epoch] that the checkpoint at `path` holds; None when there is none."""
    if not path.is_file():
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    return [int(saved["global_step"]), int(saved["epoch"])]


class ReadLastBeforeEveryBatch(L.Callback):
    """Appends to `record` what last.ckpt holds (once the writes queued so far reached the disk)
    before every training batch and when the fit ends: after every checkpoint callback's
    end-of-epoch and end-of-training saves."""

    def __init__(self, path: str, record: str) -> None:
        self.path, self.record = Path(path), Path(record)

    def _append(self, trainer: L.Trainer, where: list) -> None:
        trainer.strategy.checkpoint_io.flush()
        with self.record.open("a") as f:
            f.write(json.dumps([*where, _held(self.path)]) + "\n")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._append(trainer, [trainer.current_epoch, batch_idx])

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._append(trainer, ["fit_end"])


class KeepLastAtEpochStart(L.Callback):
    """Copies last.ckpt to `keep` at the start of `epoch`: what a kill then would leave."""

    def __init__(self, path: str, keep: str, epoch: int) -> None:
        self.path, self.keep, self.epoch = Path(path), Path(keep), epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.strategy.checkpoint_io.flush()
            shutil.copy(self.path, self.keep)


def _expected(steps: int) -> list[list]:
    """Before each batch of epoch e: the end of epoch e - 1 (nothing in epoch 0); at the fit's
    end: the state after the last of `steps` optimizer steps (one batch each)."""
    seen: list[list] = []
    for step in range(steps):
        epoch, batch = divmod(step, STEPS_PER_EPOCH)
        seen.append([epoch, batch, None if epoch == 0 else [epoch * STEPS_PER_EPOCH, epoch - 1]])
    return [*seen, ["fit_end", [steps, (steps - 1) // STEPS_PER_EPOCH]]]


CASES = {
    "every_epoch": [],
    "every_2_epochs": ["trainer.check_val_every_n_epoch=2"],
    "every_3_epochs": ["trainer.check_val_every_n_epoch=3"],
    "no_val_batches": ["trainer.limit_val_batches=0"],
    "twice_per_epoch": ["trainer.val_check_interval=0.5"],  # after batches 2 and 4
    "at_batch_3_fraction": ["trainer.val_check_interval=0.75"],  # after batch 3, not at the end
    "at_batch_3_count": ["trainer.val_check_interval=3"],  # after batch 3, not at the end
    # Every 6 batches counted across epochs: mid-epoch 1 and at epoch 2's end.
    "across_epochs": ["trainer.check_val_every_n_epoch=null", "trainer.val_check_interval=6"],
    "no_validation_step": [],
    "no_val_dataloader": [],
    # Training ends mid-epoch (2 batches into the last epoch): the end-of-training state.
    "max_steps_mid_epoch": ["trainer.max_steps=14", "trainer.check_val_every_n_epoch=2"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_last_ckpt_holds_the_newest_epoch_after_every_epoch(tmp_path: Path, case: str) -> None:
    run_dir = tmp_path / "run"
    cfg = scripted_cfg(run_dir, f"trainer.max_epochs={EPOCHS}", *CASES[case])
    last = run_dir / "checkpoints" / "last.ckpt"
    with open_dict(cfg):
        if case == "no_validation_step":
            cfg.model = OmegaConf.create({"_target_": "tests.helpers.scripted.TrainOnly"})
        if case == "no_val_dataloader":
            cfg.data = OmegaConf.create({"_target_": "tests.helpers.scripted.FourTrainPoints"})
        cfg.callbacks.read_last = {
            "_target_": f"{__name__}.ReadLastBeforeEveryBatch",
            "path": str(last),
            "record": str(tmp_path / "seen.jsonl"),
        }
    results = train(cfg)
    steps = 14 if case == "max_steps_mid_epoch" else EPOCHS * STEPS_PER_EPOCH
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert seen == _expected(steps)
    assert _held(last) == seen[-1][-1]
    assert results["last_ckpt"] == str(last)


@pytest.mark.parametrize("case", ["every_2_epochs", "every_3_epochs", "at_batch_3_count"])
def test_resume_from_a_last_ckpt_of_an_epoch_without_validation(tmp_path: Path, case: str) -> None:
    # last.ckpt of epoch 0, which ended without validation: a run killed during epoch 1 and
    # resumed from it ends as the uninterrupted run does (weights, optimizer, best, metrics).
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    kept = tmp_path / "epoch0.ckpt"
    cfg = scripted_cfg(full, f"trainer.max_epochs={EPOCHS}", *CASES[case])
    with open_dict(cfg):
        cfg.callbacks.keep_last = {
            "_target_": f"{__name__}.KeepLastAtEpochStart",
            "path": str(full / "checkpoints" / "last.ckpt"),
            "keep": str(kept),
            "epoch": 1,
        }
    want = train(cfg)
    assert step_of(kept) == STEPS_PER_EPOCH
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(kept, resumed / "checkpoints" / "last.ckpt")
    got = train(scripted_cfg(resumed, f"trainer.max_epochs={EPOCHS}", *CASES[case], "resume=auto"))
    assert_bitwise_equal(final_state(resumed), final_state(full))
    assert got["metrics"] == want["metrics"]
    assert step_of(resumed / "checkpoints" / "best.ckpt") == step_of(
        full / "checkpoints" / "best.ckpt"
    )
