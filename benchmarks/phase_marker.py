"""A callback that prints wall-clock phase markers from inside a real `scripts/train.py` run.

benchmarks/startup.py adds it with `+callbacks.bench_phase._target_=phase_marker.PhaseMarker`
(benchmarks/ on PYTHONPATH) and reads the markers from the child's stdout, so the split of
`make train` into start-up and training comes from the real process, not a re-enactment.
"""

from __future__ import annotations

import sys
import time

import lightning as L

MARK = "bench-phase"


def _mark(name: str) -> None:
    print(f"{MARK} {name} {time.time():.6f}", flush=True)


class PhaseMarker(L.Callback):
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # `stage` is a TrainerFn (a str enum whose f-string form is "TrainerFn.FITTING").
        _mark(f"setup_{getattr(stage, 'value', stage)}")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _mark("train_start")

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _mark("fit_end")
        # Which optional heavy packages this run imported: wandb must not be among them when
        # logger=csv (importing it costs seconds and starts no run, so nobody would notice).
        for name in ("wandb", "tensorboard", "matplotlib", "sklearn", "pandas"):
            print(f"{MARK} module {name} {int(name in sys.modules)}", flush=True)
