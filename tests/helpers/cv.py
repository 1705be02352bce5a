"""The cross-validation tests' run (digits, the tests' baseline run) and a fold-aware killer."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.config import QUIET_RUN
from tests.helpers.killer import KillAt

# 4 folds over digits' 1437 train+val samples (folds of 360, 359, 359, 359: unequal sizes, so a
# mean of per-fold means differs from the out-of-fold figure), one epoch of micro-batch 96 x
# accumulate 2 (a short tail window), a step checkpoint every 2 optimizer steps (so a fold can be
# resumed mid-epoch), dropout on, deterministic.
FOLDS = 4
CV_RUN = [
    f"cv.folds={FOLDS}",
    "data.batch_size=96",
    "trainer.accumulate_grad_batches=2",
    "trainer.max_epochs=1",
    "trainer.deterministic=true",
    "callbacks.step_checkpoint.every_n_train_steps=2",
    "logger=[]",
    *QUIET_RUN,
]


def read_bytes(run_dir: Path) -> tuple[bytes, str]:
    """What a resumed or joined run must reproduce: the OOF file and results.json's `cv`."""
    import json

    cv = json.loads((run_dir / "results.json").read_text())["cv"]
    return (run_dir / "oof_predictions.csv").read_bytes(), json.dumps(cv, sort_keys=True)


class KillInFold(KillAt):
    """KillAt in one fold only: `where` is `${paths.output_dir}`, which resolves to each fold's
    run dir when the fold's callbacks are built; in every other fold it never fires."""

    def __init__(self, fold: int, where: str, batch: int, phase: str = "batch_end") -> None:
        super().__init__(batch=batch, phase=phase)
        if Path(where).name != f"fold_{fold}":
            self.batch = 10**9
