"""A callback that parks a real training run inside training until the test lets it go, for the
run dir lock tests: the run is alive (holding its run dir) at a moment the test knows.

Injected through Hydra (`+callbacks.gate._target_=tests.helpers.gate.WaitForFile`); it changes
nothing in training, only when it happens.
"""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L


class WaitForFile(L.Callback):
    """When training starts, write `marker` (the test's cue), then wait until `release` exists."""

    def __init__(self, marker: str, release: str, timeout_s: float = 300) -> None:
        self.marker, self.release, self.timeout_s = Path(marker), Path(release), timeout_s

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.marker.write_text("training\n")
        deadline = time.monotonic() + self.timeout_s
        while not self.release.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.release} did not appear within {self.timeout_s:.0f} s")
            time.sleep(0.05)
