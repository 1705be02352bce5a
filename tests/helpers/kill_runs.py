"""The run the kill/resume tests interrupt: digits, micro-batch 64 x accumulate 3 (20
micro-batches/epoch: windows of 3 and a 2-batch tail window), 2 epochs, step checkpoints every 2
optimizer steps, deterministic, dropout on (so RNG restore is exercised)."""

from __future__ import annotations

from tests.helpers.config import QUIET_RUN
from tests.helpers.scripts import TESTS_IMPORTABLE

ACCUMULATE = 3
BATCHES_PER_EPOCH = 20  # ceil(1257 / 64)
EPOCHS = 2
RUN = [
    "data.batch_size=64",
    f"trainer.accumulate_grad_batches={ACCUMULATE}",
    f"trainer.max_epochs={EPOCHS}",
    "trainer.deterministic=true",
    "callbacks.step_checkpoint.every_n_train_steps=2",
    *QUIET_RUN,
]
ENV = TESTS_IMPORTABLE  # the killer callback lives in tests/helpers

# The in-process resume and pre-emption tests' run: 1257 digits / 128 = 10 micro-batches per
# epoch; K=3 -> windows of 3, 3, 3 and a tail of 1; 2 epochs, no test stage.
IN_PROCESS_RUN = [
    "data.batch_size=128",
    "trainer.accumulate_grad_batches=3",
    "trainer.max_epochs=2",
    "trainer.deterministic=true",
    *QUIET_RUN,
    "test=false",
]
