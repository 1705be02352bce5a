"""No checkpoint a run writes resumes past a validation it owes.

Lightning 2.6 resumes a checkpoint written at the end of the batch after which it validates
(the epoch's last batch, or a mid-epoch validation batch with `val_check_interval` < 1) past that
validation. With a user's own `ModelCheckpoint(every_n_train_steps=1)` and a plateau scheduler on
a validation metric, the resume from an epoch's last batch fails ("val/loss not available"); with
a mid-epoch validation, the resumed run silently never runs it. Such batches get no step
checkpoint (the template's or the user's), and every checkpoint that is written resumes exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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

EPOCHS = 3  # 4 batches an epoch


class Validations(L.Callback):
    """The global steps at which validation ran, with the loss it logged."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, float]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.seen.append((trainer.global_step, float(trainer.callback_metrics["val/loss"])))


def fit(
    run_dir: Path, saver: type[ModelCheckpoint], ckpt: Path | None = None, **trainer_kwargs: Any
) -> tuple[L.Trainer, Validations]:
    validations = Validations()
    steps = saver(
        dirpath=run_dir,
        filename="step{step}",
        every_n_train_steps=1,
        save_top_k=-1,
        auto_insert_metric_name=False,
    )
    trainer = template_trainer(
        max_epochs=EPOCHS,
        limit_val_batches=1.0,
        enable_checkpointing=True,
        callbacks=[ExactResume(), validations, steps],
        **trainer_kwargs,
    )
    trainer.fit(PlateauModule(1), loader(ResumableDataLoader), loader(), ckpt_path=ckpt)
    return trainer, validations


def _final(trainer: L.Trainer, path: Path) -> dict:
    trainer.save_checkpoint(path)
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.parametrize(
    ("saver", "trainer_kwargs", "validation_steps"),
    [
        # a user's own ModelCheckpoint(every_n_train_steps=1), validation at each epoch's end
        (ModelCheckpoint, {}, [4, 8, 12]),
        # the template's step checkpoint with a validation every half epoch
        (StepCheckpoint, {"val_check_interval": 0.5}, [2, 4, 6, 8, 10, 12]),
        # a user's checkpoint with a validation every 3 batches across epochs
        (ModelCheckpoint, {"val_check_interval": 3, "check_val_every_n_epoch": None}, None),
    ],
    ids=["user-epoch-end", "template-half-epoch", "user-every-3-batches"],
)
def test_every_written_checkpoint_resumes_with_the_validations_it_owes(
    tmp_path: Path, saver: type[ModelCheckpoint], trainer_kwargs: dict, validation_steps
) -> None:
    full, want_validations = fit(tmp_path / "full", saver, **trainer_kwargs)
    want = _final(full, tmp_path / "full.ckpt")
    validated = [step for step, _ in want_validations.seen]
    if validation_steps is not None:
        assert validated == validation_steps
    written = sorted(int(p.stem[4:]) for p in (tmp_path / "full").glob("step*.ckpt"))
    # every step but those right before a validation and an epoch's last (whose epoch end a
    # resume would skip as well)
    skipped = set(validated) | {4 * (e + 1) for e in range(EPOCHS)}
    assert written == [s for s in range(1, 4 * EPOCHS + 1) if s not in skipped]
    for step in written:
        resumed, got_validations = fit(
            tmp_path / f"from{step}",
            saver,
            tmp_path / "full" / f"step{step}.ckpt",
            **trainer_kwargs,
        )
        assert got_validations.seen == [v for v in want_validations.seen if v[0] > step], step
        got = _final(resumed, tmp_path / f"from{step}.ckpt")
        assert got["lr_schedulers"] == want["lr_schedulers"], step
        assert_bitwise_equal(got, want)
