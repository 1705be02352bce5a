"""Host-device syncs per training step under the template's task and default callbacks.

    .venv/bin/python benchmarks/host_syncs.py                 # every case and mode (CPU: probe)
    python benchmarks/host_syncs.py --strict                  # GPU: also sync_debug_mode("error")
    .venv/bin/python benchmarks/host_syncs.py --cases k1 --modes fp32 --width 4 --samples 960

A real `train()` (every default callback, CSV logger) with one more callback, `SyncCounter`,
that records the synchronisations of every training batch in a window of optimizer steps, with
the Python line that caused each:

* on a GPU, `torch.cuda.set_sync_debug_mode("warn")` and its warnings ("called a synchronizing
  CUDA operation");
* on a CPU (or `--instrument probe`), benchmarks/sync_probe.py: the calls that synchronise on a
  GPU (`.item()`, `bool()`, `.tolist()`, `.cpu()`, printing a tensor, ...), each attributed to
  trainwell (`ours`: the engine, the example tasks, the callbacks), Lightning or other code. The
  run takes the GPU's code path (the probe answers cadence.host_reads_are_free with no).

A batch's syncs are everything between its on_train_batch_start and the next one's: the step,
its hooks and Lightning's bookkeeping after it. Batches are sorted into
  reading     the last micro-batch of optimizer steps 0, N, 2N, ... (N = log_every_n_steps):
              the guards and monitors read their device values there (callbacks/cadence.py)
  epoch_end   an epoch's last batch: validation, checkpoints and epoch-end logging follow it
  checkpoint  a batch after which a checkpoint was saved (step checkpoints)
  planted     one batch with a planted `.item()`: proof the instrument sees syncs at all
  steady      every other batch: the steady-state step (target: 0 syncs)

Cases (every default callback; trainer.log_every_n_steps as noted):
  default  the default experiment (digits, DigitsCNN, AdamW): K=1, log every 10
  k1       model=resnet18 on on-device synthetic data: K=1, log every 10
  k4       experiment=resnet_accum on on-device synthetic data: K=4, log every 4
  lm       experiment=lm_accum (LanguageModelTask, token-exact accumulation): K=4, log every 4
Modes (k1 and k4; default and lm run fp32 and bf16): fp32, bf16 (bf16-mixed), bf16_cl (bf16 +
channels_last batches and model), bf16_cl_compile (GPU only).

`--strict` (GPU): one more run per case and mode with `set_sync_debug_mode("error")` in every
steady batch: any sync there raises and fails the run; a deliberate `.item()` in one steady batch
must raise (proof the mode is on). Writes host_syncs.json to --out or $OUT when set.
Last line: `<case>_<mode>_ours=.. _lightning=.. _other=..` steady syncs per run, `..._reading=`,
`..._planted_seen=`, and with --strict `..._strict=` (1: passed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

if __name__ == "__main__":
    # Hydra instantiates `host_syncs.SyncCounter` by import: make that name this very module.
    sys.modules.setdefault("host_syncs", sys.modules["__main__"])

import harness
import lightning as L
import torch
from harness import compose, final_line, output_dir, parse_args

from trainwell.callbacks.cadence import is_reading_step

SYNC_MESSAGE = "synchroniz"  # "called a synchronizing CUDA operation"

# The digits classifier the template ships as its default run, named (a project that points
# conf/train.yaml at its own data and model keeps measuring the same run).
CLASSIFIER = ["monitor.metric=val/acc", "monitor.mode=max"]
DIGITS = ["data=digits", *CLASSIFIER]

# name -> (overrides, first measured optimizer step, first step after the window or None)
CASES: dict[str, tuple[list[str], int, int | None]] = {
    # digits: 20 micro-batches of 64
    "default": ([*DIGITS, "model=digits_cnn", "trainer.log_every_n_steps=10"], 2, None),
    # 60 micro-batches of 64 = 60 optimizer steps; reading steps 0, 10, 20, ...
    "k1": ([*CLASSIFIER, "model=resnet18", "trainer.log_every_n_steps=10"], 12, 55),
    # experiment=resnet_accum: K=4, 60 micro-batches = 15 steps; reading steps 0, 4, 8, 12
    "k4": (["experiment=resnet_accum", "trainer.log_every_n_steps=4"], 2, 14),
    # experiment=lm_accum: K=4, 64 micro-batches of 16 = 16 steps; reading steps 0, 4, 8, 12
    "lm": (["experiment=lm_accum", "trainer.log_every_n_steps=4", "trainer.max_epochs=1"], 2, None),
}
# Each case's example, and the engine's own stand-in where one fits (the default run's digits).
LM = ("project.tasks.language_model", "project.models.transformer", "project.data.sequences")
CASE_WORKLOADS = {
    "default": harness.Workload(
        "the digits example",
        tuple(CASES["default"][0]),
        harness.DIGITS.needs,
        owned=(*harness.OWNED, "trainer.log_every_n_steps=10"),
    ),
    "k1": harness.Workload(
        "the ResNet-18 example", tuple(CASES["k1"][0]), (*harness.RESNET, *harness.SYNTHETIC)
    ),
    "k4": harness.Workload(
        "the ResNet-18 example", tuple(CASES["k4"][0]), (*harness.RESNET, *harness.SYNTHETIC)
    ),
    "lm": harness.Workload("the language-model example", tuple(CASES["lm"][0]), LM),
}
CIFAR_SHAPED = ("k1", "k4")
MODES: dict[str, list[str]] = {
    "fp32": ["trainer.precision=32-true", "data.channels_last=false"],
    "bf16": ["trainer.precision=bf16-mixed", "data.channels_last=false"],
    "bf16_cl": [
        "trainer.precision=bf16-mixed",
        "data.channels_last=true",
        "+callbacks.bench_cl._target_=loops.ChannelsLast",
    ],
    "bf16_cl_compile": [
        "trainer.precision=bf16-mixed",
        "data.channels_last=true",
        "+callbacks.bench_cl._target_=loops.ChannelsLast",
        "model.compile=true",
    ],
}


def case_overrides(case: str, mode: str, width: int, samples: int) -> list[str]:
    overrides = harness.resolve(CASE_WORKLOADS[case])
    if overrides is None:
        raise ValueError(f"case {case!r}: its example is not in this clone")
    device = "gpu" if torch.cuda.is_available() else "cpu"
    common = [f"trainer={device}", "trainer.max_epochs=1", "test=false", "print_config=false"]
    if case in CIFAR_SHAPED:
        common += [
            *("data=synthetic", "data.on_device=true", "data.augment=true"),
            *(f"data.num_samples={samples}", "data.num_val=256", "data.batch_size=64"),
            f"model.net.width={width}",
        ]
        mode_overrides = MODES[mode]
    else:  # no image batches to lay out: the precision alone
        mode_overrides = [MODES[mode][0]]
        if case == "lm":
            common += ["data.num_sequences=1024", "model.net.dim=16", "model.net.depth=1"]
    return [*common, *overrides, *mode_overrides]


class SyncCounter(L.Callback):
    """Records the syncs of every training batch for optimizer steps [start, stop) (`stop`
    None: to the end) and sorts the batches (see the module docstring). `instrument`: "cuda"
    (set_sync_debug_mode warnings), "probe" (sync_probe.SyncProbe) or "error" (CUDA's error
    mode in steady batches; nothing recorded, a sync raises)."""

    last: ClassVar[SyncCounter | None] = None  # Hydra builds it inside train()

    def __init__(
        self,
        start: int,
        stop: int | None = None,
        plant: int | None = None,
        instrument: str = "cuda",
    ) -> None:
        SyncCounter.last = self
        self.start, self.stop, self.plant, self.instrument = start, stop, plant, instrument
        self.batches: list[dict[str, Any]] = []
        self.strict_checked = False  # error mode: the deliberate .item() raised
        self._stack: contextlib.ExitStack | None = None
        self._thread: int | None = None
        self._records: list[Any] = []
        self._probe: Any = None
        self._current: dict[str, Any] | None = None
        self._planted = False

    # -- the instruments -----------------------------------------------------------------------
    def _cuda_mode(self, mode: str) -> None:
        if torch.cuda.is_available() and self.instrument in ("cuda", "error"):
            torch.cuda.set_sync_debug_mode(mode)

    def _taken(self) -> list[dict[str, str]]:
        if self.instrument == "probe":
            return [vars(s) for s in self._probe.take()]
        found, self._records = self._records, []
        return found

    def _on_warning(self, message: Any, *args: Any, **kwargs: Any) -> None:
        # The training thread's syncs only: a checkpoint writer thread's copies to the host do
        # not hold the step (and show in the step times of `benchmarks/pace.py epoch` instead).
        if SYNC_MESSAGE in str(message) and threading.get_ident() == self._thread:
            import sync_probe

            owner, where = sync_probe.caller(sys._getframe(1))
            self._records.append({"call": "cuda", "owner": owner, "where": where})

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stack = contextlib.ExitStack()
        self._thread = threading.get_ident()
        if self.instrument == "probe":
            import sync_probe

            self._probe = self._stack.enter_context(sync_probe.SyncProbe())
        else:
            self._stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("always")
            warnings.showwarning = self._on_warning
        # A checkpoint saved in a batch's window marks the batch (its syncs are the save's).
        save = trainer.save_checkpoint

        def marked_save(*args: Any, **kwargs: Any) -> Any:
            if self._current is not None:
                self._current["kind"] = "checkpoint"
            return save(*args, **kwargs)

        trainer.save_checkpoint = marked_save  # type: ignore[method-assign]  # this run only

    # -- per batch -------------------------------------------------------------------------------
    def _close(self) -> None:
        taken = self._taken() if self._stack is not None else []
        if self._current is not None:
            self._current["syncs"] = taken
            self.batches.append(self._current)
            self._current = None

    def _in_window(self, step: int) -> bool:
        return self.start <= step and (self.stop is None or step < self.stop)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._cuda_mode("default")
        self._close()
        step = trainer.global_step
        if not self._in_window(step):
            return
        kind = "steady"
        if batch_idx + 1 >= trainer.num_training_batches:
            kind = "epoch_end"
        elif _reading_ahead(trainer, batch_idx):
            kind = "reading"
        self._current = {"batch": batch_idx, "step": step, "kind": kind}
        if self.instrument == "error" and kind == "steady":
            self._cuda_mode("error")
        elif self.instrument == "cuda":
            self._cuda_mode("warn")

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        current = self._current
        if current is None:
            return
        # The prediction at batch start must agree with the cadence the callbacks follow.
        reading = is_reading_step(trainer, batch_idx + 1)
        assert reading == (current["kind"] == "reading") or current["kind"] == "epoch_end"
        if self.plant is None or self._planted or trainer.global_step < self.plant:
            return
        if current["kind"] != "steady":
            return
        self._planted = True
        current["kind"] = "planted"
        if self.instrument == "error":
            try:
                torch.ones(1, device=pl_module.device).sum().item()
            except RuntimeError as err:  # the mode is on: the sync was refused
                self.strict_checked = SYNC_MESSAGE in str(err) or "synchron" in str(err)
            return
        current["before_plant"] = self._taken()  # the batch's syncs: the plant counts alone
        torch.ones(1, device=pl_module.device).sum().item()  # the planted sync

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._cuda_mode("default")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._cuda_mode("default")
        self._close()
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, err: Any) -> None:
        self._cuda_mode("default")
        if self._stack is not None:
            self._stack.close()
            self._stack = None


def _reading_ahead(trainer: L.Trainer, batch_idx: int) -> bool:
    """At batch start: whether this batch will end a reading step (cadence.is_reading_step,
    evaluated before the optimizer step moves global_step)."""
    from trainwell.callbacks.cadence import window_ends

    every = trainer.log_every_n_steps or 1
    return window_ends(trainer, batch_idx + 1) and trainer.global_step % every == 0


def count_syncs(
    case: str,
    mode: str = "fp32",
    plant: bool = True,
    instrument: str | None = None,
    width: int = 16,
    samples: int = 3840,
    extra: list[str] | None = None,
) -> dict[str, Any]:
    """Run one case in one mode; per-batch records and the summary figures."""
    _, start, stop = CASES[case]
    overrides = [*case_overrides(case, mode, width, samples), *(extra or [])]
    result = count_run(overrides, start, stop, plant, instrument)
    return {"case": case, "mode": mode, **result}


def count_run(
    overrides: list[str],
    start: int,
    stop: int | None = None,
    plant: bool = True,
    instrument: str | None = None,
) -> dict[str, Any]:
    """`train()` on these overrides with a SyncCounter over optimizer steps [start, stop)."""
    import host_syncs  # the module Hydra imports the counter from (this file may be __main__)

    from trainwell.training.run import train

    instrument = instrument or ("cuda" if torch.cuda.is_available() else "probe")
    plant_step = start + 3 if plant else None
    install = [
        "+callbacks.sync_counter._target_=host_syncs.SyncCounter",
        f"+callbacks.sync_counter.start={start}",
        f"+callbacks.sync_counter.stop={'null' if stop is None else stop}",
        f"+callbacks.sync_counter.plant={'null' if plant_step is None else plant_step}",
        f"+callbacks.sync_counter.instrument={instrument}",
    ]
    host_syncs.SyncCounter.last = None
    with tempfile.TemporaryDirectory(prefix="tw-syncs-") as tmp:
        train(compose([*overrides, *install], Path(tmp)))
    counter = host_syncs.SyncCounter.last
    assert counter is not None
    return summarise(instrument, overrides, counter)


def summarise(instrument: str, overrides: list[str], counter: SyncCounter) -> dict[str, Any]:
    kinds = Counter(b["kind"] for b in counter.batches)
    steady = [b for b in counter.batches if b["kind"] == "steady"]
    planted = [b for b in counter.batches if b["kind"] == "planted"]
    result: dict[str, Any] = {
        "instrument": instrument,
        "overrides": overrides,
        "batches": counter.batches,
        "batch_kinds": dict(kinds),
        "planted_seen": all(b["syncs"] for b in planted) if planted else None,
        "strict_checked": counter.strict_checked,
    }
    for owner in ("ours", "lightning", "other"):
        found = [s for b in steady for s in b["syncs"] if s["owner"] == owner]
        result[f"steady_{owner}"] = len(found)
        result[f"steady_{owner}_where"] = dict(Counter(f"{s['call']} {s['where']}" for s in found))
    for kind in ("reading", "epoch_end", "checkpoint"):
        found = [s for b in counter.batches if b["kind"] == kind for s in b["syncs"]]
        result[f"{kind}_syncs"] = len(found)
        result[f"{kind}_where"] = dict(
            Counter(f"{s['owner']} {s['call']} {s['where']}" for s in found)
        )
    result["steady_batches"] = len(steady)
    return result


def strict_run(case: str, mode: str, width: int, samples: int) -> dict[str, Any]:
    """GPU: CUDA's error mode in every steady batch; passes when the run ends and the deliberate
    `.item()` raised."""
    try:
        result = count_syncs(case, mode, instrument="error", width=width, samples=samples)
    except RuntimeError as err:
        return {"passed": False, "error": str(err).splitlines()[0]}
    return {"passed": bool(result["strict_checked"]), "steady_batches": result["steady_batches"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    gpu = torch.cuda.is_available()
    default_modes = [m for m in MODES if gpu or m != "bf16_cl_compile"]
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=default_modes)
    parser.add_argument("--instrument", choices=["cuda", "probe"], default=None)
    parser.add_argument("--strict", action="store_true", help="GPU: set_sync_debug_mode('error')")
    parser.add_argument("--width", type=int, default=16, help="ResNet-18 width (k1, k4)")
    parser.add_argument("--samples", type=int, default=3840, help="training images (k1, k4)")
    parser.add_argument("--out", default=None)
    title = "host syncs per training step (set_sync_debug_mode on a GPU, sync_probe on a CPU)"
    note = harness.substitution(CASE_WORKLOADS["default"])
    title += f", the default case {note}" if note else ""
    args = parse_args(parser, argv, title, threads=0)  # torch's default: nothing here is timed
    if args.strict and not gpu:
        parser.error("--strict needs a CUDA GPU (set_sync_debug_mode)")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    results: dict[str, Any] = {}
    figures: dict[str, float | int | str] = {"device": "cuda" if gpu else "cpu"}
    for case in args.cases:
        if harness.resolve(CASE_WORKLOADS[case]) is None:
            print(harness.skip_line(f"case {case!r}", harness.missing(CASE_WORKLOADS[case].needs)))
            continue
        modes = args.modes if case in CIFAR_SHAPED else [m for m in args.modes if "_cl" not in m]
        for mode in modes:
            res = count_syncs(case, mode, instrument=args.instrument, width=args.width,
                              samples=args.samples)  # fmt: skip
            name = f"{case}_{mode}"
            print(
                f"{name}: {res['steady_batches']} steady batches: ours {res['steady_ours']} "
                f"{res['steady_ours_where']}, lightning {res['steady_lightning']} "
                f"{res['steady_lightning_where']}, other {res['steady_other']}; "
                f"{res['reading_syncs']} at reading steps; planted seen: {res['planted_seen']}",
                flush=True,
            )
            for owner in ("ours", "lightning", "other"):
                figures[f"{name}_{owner}"] = res[f"steady_{owner}"]
            figures[f"{name}_reading"] = res["reading_syncs"]
            figures[f"{name}_planted_seen"] = int(bool(res["planted_seen"]))
            if args.strict:
                res["strict"] = strict_run(case, mode, args.width, args.samples)
                figures[f"{name}_strict"] = int(res["strict"]["passed"])
                print(f"{name} strict: {res['strict']}", flush=True)
            results[name] = res
    out = output_dir(args.out)
    if out is not None:
        (out / "host_syncs.json").write_text(json.dumps(results, indent=1))
    final_line(**figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
