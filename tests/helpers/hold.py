"""A callback that holds a real training run at a chosen step until the run's pre-emption handler
has received its signal, for the SLURM tests.

Without it a test that signals "some time after the first checkpoint" races the run itself: a
short CPU run can finish training before SLURM delivers the signal, and the signal then meets
whatever handler is left (submitit's, which requeues the job from scratch). Held, the signal always
lands mid-training, at a step the test knows. Injected through Hydra (`+callbacks.hold._target_=...`),
like the kill/resume tests' killer; it changes nothing in training, only when it happens.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L

from trainwell.callbacks.preemption import PreemptionCheckpoint


class HoldUntilSignalled(L.Callback):
    """After the optimizer step that makes global_step == `step`, write `marker` (the test's cue
    to send the signal) and wait until the pre-emption handler has the signal. Once per run
    directory: the marker survives the requeue, so the resumed run is never held again (after
    a resume mid-accumulation-window global_step repeats)."""

    def __init__(
        self, marker: str, step: int = 2, enabled: bool = True, timeout_s: float = 300
    ) -> None:
        self.marker, self.step = Path(marker), step
        self.enabled, self.timeout_s = enabled, timeout_s
        self._armed = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Decided once per process, before rank 0 writes the marker: every rank holds.
        self._armed = self.enabled and stage == "fit" and not self.marker.exists()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, i: int
    ) -> None:
        if not self._armed or trainer.global_step != self.step:
            return
        self._armed = False
        (handler,) = [c for c in trainer.callbacks if isinstance(c, PreemptionCheckpoint)]
        if trainer.is_global_zero:
            self.marker.write_text(f"held at step {self.step}\n")
        deadline = time.monotonic() + self.timeout_s
        while handler.received is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no pre-emption signal within {self.timeout_s:.0f} s")
            time.sleep(0.05)
