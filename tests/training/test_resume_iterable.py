"""A mid-epoch resume over an iterable (streaming) dataset: exact when the dataset can restart
an epoch at any sample (`set_epoch`, `start_at`); otherwise the run says at launch that such a
resume replays or skips samples, and that epoch-end checkpoints resume exactly."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from tests.helpers.plateau import PlateauModule
from tests.helpers.state import assert_bitwise_equal
from tests.helpers.streams import PlainStreamData, RestartableStreamData
from tests.helpers.trainers import template_trainer, templated
from trainwell.callbacks.step_checkpoint import StepCheckpoint
from trainwell.callbacks.training_state import ExactResume
from trainwell.loading.sharding import LoaderPolicyWarning

pytestmark = pytest.mark.engine  # needs nothing of the examples


def fit(run_dir: Path, data: type[L.LightningDataModule], ckpt: Path | None = None) -> dict:
    steps = StepCheckpoint(
        dirpath=run_dir,
        filename="step{step}",
        every_n_train_steps=1,
        save_top_k=-1,
        auto_insert_metric_name=False,
    )
    trainer = template_trainer(
        max_epochs=3,
        limit_val_batches=1.0,
        enable_checkpointing=True,
        callbacks=[ExactResume(), steps],
    )
    trainer.fit(PlateauModule(1, "step_lr"), datamodule=templated(data()), ckpt_path=ckpt)
    trainer.save_checkpoint(run_dir / "final.ckpt")
    return torch.load(run_dir / "final.ckpt", map_location="cpu", weights_only=True)


def test_a_restartable_stream_resumes_mid_epoch_exactly(tmp_path: Path) -> None:
    want = fit(tmp_path / "full", RestartableStreamData)
    # 4 batches an epoch (8, 8, 8, 6): mid-epoch checkpoints of epochs 0, 1 and 2
    for step in (3, 6):
        got = fit(
            tmp_path / f"from{step}", RestartableStreamData, tmp_path / "full" / f"step{step}.ckpt"
        )
        assert_bitwise_equal(got, want)


def test_a_stream_that_cannot_restart_is_named_at_launch(tmp_path: Path) -> None:
    with pytest.warns(LoaderPolicyWarning, match="PlainStream .*replays or skips samples"):
        fit(tmp_path / "run", PlainStreamData)
