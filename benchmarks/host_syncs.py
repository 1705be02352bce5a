"""Host-device syncs per training batch under the template's default callbacks (GPU only).

    python benchmarks/host_syncs.py                    # ResNet-18 bf16, K=1 and K=4 (resnet_accum)

A real `train()` (trainer=gpu, bf16-mixed, data=synthetic on the device, every default callback,
CSV logger) with one more callback that turns on `torch.cuda.set_sync_debug_mode("warn")` for
the batches of a window of optimizer steps and records each warning ("called a synchronizing
CUDA operation") with the Python line that caused it, batch by batch. The template's callbacks
read device values only at their reading steps: the last micro-batch of optimizer steps 0, N,
2N, ... (N = trainer.log_every_n_steps; callbacks/cadence.py). Figure: syncs in every other
batch of the window (target 0), and where any came from.

A planted `.item()` in one batch of the window proves the instrument sees syncs at all (the run
is rejected as evidence if it does not). Writes host_syncs.json to --out or $OUT when set.
Last line: `<case>_outside=.. <case>_reading=.. <case>_planted_seen=..` per case.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from harness import final_line, output_dir, parse_args

from trainwell.callbacks.cadence import is_reading_step

SYNC_MESSAGE = "synchroniz"  # "called a synchronizing CUDA operation"

# name -> (overrides, first measured optimizer step, first step after the window)
CASES: dict[str, tuple[list[str], int, int]] = {
    # 60 micro-batches of 64 = 60 optimizer steps; reading steps 0, 10, 20, ...
    "k1": (["model=resnet18", "trainer.log_every_n_steps=10"], 12, 55),
    # experiment=resnet_accum: K=4, 60 micro-batches = 15 steps; reading steps 0, 4, 8, 12
    "k4": (["experiment=resnet_accum", "trainer.log_every_n_steps=4"], 2, 14),
}
COMMON = [
    "data=synthetic",
    "data.on_device=true",
    "data.augment=true",
    "data.num_samples=3840",
    "data.num_val=256",
    "data.batch_size=64",
    "model.net.width=16",
    "trainer=gpu",
    "trainer.precision=bf16-mixed",
    "trainer.max_epochs=1",
    "test=false",
    "print_config=false",
]


def _debug_mode(mode: str) -> None:
    if torch.cuda.is_available():
        torch.cuda.set_sync_debug_mode(mode)


class SyncCounter(L.Callback):
    """Records sync warnings per training batch for optimizer steps [start, stop); plants one
    `.item()` in the first micro-batch of optimizer step `plant`."""

    last: ClassVar[SyncCounter | None] = None  # Hydra builds it inside train()

    def __init__(self, start: int, stop: int, plant: int | None = None) -> None:
        SyncCounter.last = self
        self.start, self.stop, self.plant = start, stop, plant
        self.batches: list[dict[str, Any]] = []
        self._stack: contextlib.ExitStack | None = None
        self._records: list[warnings.WarningMessage] = []
        self._current: dict[str, Any] | None = None
        self._planted = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stack = contextlib.ExitStack()
        self._records = self._stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")

    def _close(self) -> None:
        if self._current is not None:
            self._current["syncs"] = [
                f"{Path(w.filename).name}:{w.lineno} ({w.filename})"
                for w in self._records
                if SYNC_MESSAGE in str(w.message)
            ]
            self.batches.append(self._current)
            self._current = None
        self._records.clear()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        _debug_mode("default")
        self._close()
        step = trainer.global_step
        if self.start <= step < self.stop:
            self._current = {"batch": batch_idx, "step": step, "reading": False, "planted": False}
            _debug_mode("warn")

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        if self._current is None:
            return
        self._current["reading"] = is_reading_step(trainer, batch_idx + 1)
        if self.plant is not None and not self._planted and trainer.global_step >= self.plant:
            torch.ones(1, device=pl_module.device).sum().item()  # the planted sync
            self._current["planted"] = self._planted = True

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _debug_mode("default")
        self._close()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _debug_mode("default")
        self._close()
        if self._stack is not None:
            self._stack.close()


def count_syncs(case: str, plant: bool = True, extra: list[str] | None = None) -> dict[str, Any]:
    """Run one case; return per-batch records and the summary figures."""
    import host_syncs  # the module Hydra imports the counter from (this file may be __main__)
    from harness import compose

    from trainwell.training.run import train

    overrides, start, stop = CASES[case]
    plant_step = (start + stop) // 2 if plant else None
    install = [
        "+callbacks.sync_counter._target_=host_syncs.SyncCounter",
        f"+callbacks.sync_counter.start={start}",
        f"+callbacks.sync_counter.stop={stop}",
        f"+callbacks.sync_counter.plant={'null' if plant_step is None else plant_step}",
    ]
    if not torch.cuda.is_available():
        install.append("trainer=cpu")  # the plumbing only (tests): no device, nothing to count
    with tempfile.TemporaryDirectory(prefix="tw-syncs-") as tmp:
        train(compose([*COMMON, *overrides, *install, *(extra or [])], Path(tmp)))
    counter = host_syncs.SyncCounter.last
    assert counter is not None
    outside = [b for b in counter.batches if not b["reading"] and not b["planted"]]
    reading = [b for b in counter.batches if b["reading"] and not b["planted"]]
    planted = [b for b in counter.batches if b["planted"]]
    return {
        "case": case,
        "overrides": [*COMMON, *overrides],
        "window_steps": [start, stop],
        "batches_measured": len(counter.batches),
        "syncs_outside_reading_steps": sum(len(b["syncs"]) for b in outside),
        "syncs_at_reading_steps": sum(len(b["syncs"]) for b in reading),
        "planted_seen": all(len(b["syncs"]) >= 1 for b in planted) if planted else None,
        "offenders": sorted({s for b in outside for s in b["syncs"]}),
        "reading_sources": sorted({s for b in reading for s in b["syncs"]}),
        "batches": counter.batches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--out", default=None)
    title = "host syncs per training batch (torch.cuda.set_sync_debug_mode)"
    args = parse_args(parser, argv, title, threads=0)  # torch's default: nothing here is timed
    if not torch.cuda.is_available():
        print("NOTE: no CUDA device: the run goes through (the plumbing), but there is nothing")
        print("to count; these are not GPU figures")
    results = {case: count_syncs(case) for case in args.cases}
    figures: dict[str, float | int | str] = {
        "device": "cuda" if torch.cuda.is_available() else "cpu"
    }
    for case, res in results.items():
        print(
            f"{case}: {res['batches_measured']} batches measured, "
            f"{res['syncs_outside_reading_steps']} syncs outside reading steps "
            f"{res['offenders']}, {res['syncs_at_reading_steps']} at reading steps "
            f"{res['reading_sources']}, planted sync seen: {res['planted_seen']}"
        )
        figures[f"{case}_outside"] = res["syncs_outside_reading_steps"]
        figures[f"{case}_reading"] = res["syncs_at_reading_steps"]
        figures[f"{case}_planted_seen"] = int(bool(res["planted_seen"]))
    out = output_dir(args.out)
    if out is not None:
        (out / "host_syncs.json").write_text(json.dumps(results, indent=1))
    final_line(**figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
