"""When the template's callbacks may read device values: once per logging interval.

Reading a GPU value on the host (`.item()`, `float()`, `bool()`, `.tolist()`) makes the host wait
until the GPU has finished everything queued, so the next step's kernels are not queued in time.
The guards and monitors keep their values on the device and read them together, after the last
micro-batch of optimizer steps 0, N, 2N, ... with N = trainer.log_every_n_steps unless a callback
says otherwise: the steps at which GradNormLogger reads its norms anyway.
"""

from __future__ import annotations

import lightning as L
import torch


def window_ends(trainer: L.Trainer, batches_done: int) -> bool:
    """True right after an optimizer step: the end of an accumulation window, or the shorter tail
    window that ends the epoch."""
    return (
        batches_done % trainer.accumulate_grad_batches == 0
        or batches_done >= trainer.num_training_batches
    )


def is_reading_step(trainer: L.Trainer, batches_done: int, every: int | None = None) -> bool:
    """In on_train_batch_end: whether the optimizer step that just ended is a reading step."""
    every = every or trainer.log_every_n_steps or 1
    return window_ends(trainer, batches_done) and (trainer.global_step - 1) % every == 0


def host_reads_are_free(device: torch.device) -> bool:
    """Whether the host can read a value on `device` without waiting for queued work: on the
    CPU it can, so the callbacks read and check at once there. The one place that decides it,
    so a probe that counts a GPU's syncs on a CPU (benchmarks/sync_probe.py) can send a CPU run
    down the GPU's code path."""
    return device.type == "cpu"
