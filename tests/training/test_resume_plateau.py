"""A ReduceLROnPlateau scheduler resumed from an end-of-epoch checkpoint (written by
ModelCheckpoint at the end of validation, before Lightning's plateau step) ends exactly where the
uninterrupted run does: scheduler state, learning rate, optimizer state, weights. So does a run
resumed from a mid-epoch step checkpoint (StepCheckpoint, written at a batch's end), with a
plateau scheduler stepped per epoch or per step, or a plain per-epoch scheduler."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from tests.helpers.plateau import PlateauModule, loader
from tests.helpers.state import assert_bitwise_equal
from tests.helpers.trainers import template_trainer
from trainwell.callbacks.step_checkpoint import StepCheckpoint
from trainwell.callbacks.training_state import ExactResume
from trainwell.loading.resumable import ResumableDataLoader

pytestmark = pytest.mark.engine  # needs nothing of the examples

EPOCHS = 4


def fit(
    run_dir: Path,
    frequency: int,
    ckpt_path: Path | None = None,
    before: list[L.Callback] | None = None,
    schedule: str = "plateau",
    every_step: bool = False,
) -> tuple[L.Trainer, PlateauModule]:
    saver = ModelCheckpoint(
        dirpath=run_dir, filename="epoch{epoch}", save_top_k=-1, auto_insert_metric_name=False
    )
    savers: list[L.Callback] = [saver]
    if every_step:  # step{N}.ckpt after every optimizer step but an epoch's last
        savers.append(
            StepCheckpoint(
                dirpath=run_dir,
                filename="step{step}",
                every_n_train_steps=1,
                save_top_k=-1,
                auto_insert_metric_name=False,
            )
        )
    trainer = template_trainer(
        max_epochs=EPOCHS,
        limit_val_batches=1.0,
        enable_checkpointing=True,
        callbacks=[*(before or []), ExactResume(), *savers],
    )
    module = PlateauModule(frequency, schedule)
    # A resumable train loader: a mid-epoch resume continues at the saved batch.
    trainer.fit(module, loader(ResumableDataLoader), loader(), ckpt_path=ckpt_path)
    return trainer, module


def final(trainer: L.Trainer, path: Path) -> dict:
    trainer.save_checkpoint(path)
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.parametrize("frequency", [1, 2])
def test_a_resume_from_an_epoch_end_checkpoint_takes_its_plateau_step(
    tmp_path: Path, frequency: int
) -> None:
    full_trainer, full = fit(tmp_path / "full", frequency)
    want = final(full_trainer, tmp_path / "full.ckpt")
    plateau = want["lr_schedulers"][0]
    assert plateau["last_epoch"] == EPOCHS // frequency  # the schedule really stepped
    assert plateau["num_bad_epochs"] == 0 and plateau["_last_lr"][0] < 0.5  # and cut the LR
    for epoch in range(EPOCHS - 1):
        trainer, resumed = fit(
            tmp_path / f"from{epoch}", frequency, tmp_path / "full" / f"epoch{epoch}.ckpt"
        )
        got = final(trainer, tmp_path / f"from{epoch}.ckpt")
        assert got["lr_schedulers"] == want["lr_schedulers"], epoch
        assert (
            trainer.optimizers[0].param_groups[0]["lr"]
            == full_trainer.optimizers[0].param_groups[0]["lr"]
        ), epoch
        assert_bitwise_equal(got, want)
        for name, value in full.state_dict().items():
            assert torch.equal(resumed.state_dict()[name], value), (epoch, name)


class UpstreamStep(L.Callback):
    """A Lightning that takes the missed plateau step on restart itself (before the template's
    callbacks run): the template must not take it a second time."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        state = next(c for c in trainer.callbacks if isinstance(c, ExactResume))
        trainer.lr_scheduler_configs[0].scheduler.step(state.restored_callback_metrics["val/loss"])


def test_a_plateau_step_already_taken_on_restart_is_not_taken_twice(tmp_path: Path) -> None:
    full_trainer, _ = fit(tmp_path / "full", 1)
    want = final(full_trainer, tmp_path / "full.ckpt")
    ckpt = tmp_path / "full" / "epoch1.ckpt"
    trainer, _ = fit(tmp_path / "resumed", 1, ckpt, before=[UpstreamStep()])
    got = final(trainer, tmp_path / "resumed.ckpt")
    assert got["lr_schedulers"] == want["lr_schedulers"]
    assert_bitwise_equal(got, want)


@pytest.mark.parametrize(
    ("schedule", "frequency"),
    [
        ("plateau", 1),
        ("plateau", 2),
        ("plateau_step", 1),
        ("plateau_step", 2),
        ("plateau_step", 3),
        ("step_lr", 1),
        ("step_lr", 2),
    ],
)
def test_a_resume_from_a_mid_epoch_checkpoint_ends_where_the_uninterrupted_run_does(
    tmp_path: Path, schedule: str, frequency: int
) -> None:
    full_trainer, full = fit(tmp_path / "full", frequency, schedule=schedule, every_step=True)
    want = final(full_trainer, tmp_path / "full.ckpt")
    scheduler = want["lr_schedulers"][0]
    # A per-step schedule counts batches within the epoch (4 an epoch) for its frequency.
    steps = EPOCHS * (4 // frequency) if schedule == "plateau_step" else EPOCHS // frequency
    assert scheduler["last_epoch"] == steps  # the schedule really stepped
    assert scheduler["_last_lr"][0] < 0.5  # and cut the LR
    # 4 batches an epoch: steps 2 and 6 are the second batches of epochs 0 and 1 (an epoch's
    # plateau step with frequency 1 or 2 is due at the end of one of them), step 11 the third of
    # epoch 2. A per-step plateau is due at the checkpoint's own batch: frequency 1 always,
    # 2 at steps 2 and 6, 3 at step 11.
    for step in (2, 6, 11):
        ckpt = tmp_path / "full" / f"step{step}.ckpt"
        trainer, resumed = fit(tmp_path / f"from{step}", frequency, ckpt, schedule=schedule)
        got = final(trainer, tmp_path / f"from{step}.ckpt")
        assert got["lr_schedulers"] == want["lr_schedulers"], step
        assert (
            trainer.optimizers[0].param_groups[0]["lr"]
            == full_trainer.optimizers[0].param_groups[0]["lr"]
        ), step
        assert_bitwise_equal(got, want)
        for name, value in full.state_dict().items():
            assert torch.equal(resumed.state_dict()[name], value), (step, name)
