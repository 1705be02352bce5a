"""Real runs on the on-device pipeline with augmentation on: a mid-epoch resume is bitwise exact,
and 2 DDP ranks train the same weights as 1 process with the doubled batch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.config import QUIET_RUN, compose_config
from tests.helpers.ranks import run_and_load
from tests.helpers.state import assert_bitwise_equal, load_checkpoint
from trainwell.training.run import train

ON_DEVICE = ["data=synthetic", "data.on_device=true", "data.augment=true"]
# 128 samples / 32 = 4 micro-batches per epoch, K=2: 2 optimizer steps per epoch.
RUN = [
    *ON_DEVICE,
    "model=resnet18",
    "model.net.width=4",
    "data.num_samples=128",
    "data.num_val=32",
    "data.num_test=32",
    "data.batch_size=32",
    "trainer.accumulate_grad_batches=2",
    "trainer.max_epochs=2",
    "trainer.deterministic=true",
    *QUIET_RUN,
    "test=false",
]


@pytest.mark.example("project.data.synthetic", "project.models.resnet")
def test_resume_mid_epoch_is_bitwise_exact_with_on_device_augmentation(tmp_path: Path) -> None:
    full = tmp_path / "full"
    every = [
        "callbacks.step_checkpoint.every_n_train_steps=1",
        "callbacks.step_checkpoint.save_top_k=-1",
    ]
    train(compose_config([*RUN, *every], full))
    want = load_checkpoint(full / "checkpoints" / "last.ckpt")
    assert want["global_step"] == 4
    for step in (1, 3):  # mid-epoch 0 (after 2 of 4 batches), mid-epoch 1
        run_dir = tmp_path / f"resumed-{step}"
        (run_dir / "checkpoints").mkdir(parents=True)
        source = full / "checkpoints" / f"step-{step:07d}.ckpt"
        shutil.copy(source, run_dir / "checkpoints" / source.name)
        train(compose_config([*RUN, "resume=auto"], run_dir))
        assert_bitwise_equal(load_checkpoint(run_dir / "checkpoints" / "last.ckpt"), want)


@pytest.mark.example("project.data.synthetic")
@pytest.mark.slow
def test_two_ranks_equal_one_process_with_on_device_augmentation(tmp_path: Path) -> None:
    """Each sample's crop and flip depend on (seed, epoch, sample) only, so the ranks' shares of
    an epoch carry exactly the views one process would see."""
    overrides = [*ON_DEVICE, "trainer.max_epochs=2"]
    ddp = run_and_load(
        tmp_path / "ddp", *overrides, "trainer=ddp_sim", "data.batch_size=8",
        "trainer.accumulate_grad_batches=2",
    )  # fmt: skip
    single = run_and_load(tmp_path / "single", *overrides, "trainer=cpu", "data.batch_size=32")
    assert set(ddp) == set(single)
    diff = max((ddp[k] - single[k]).abs().max().item() for k in ddp)
    assert diff <= 1e-6, diff
