"""The doctor's knobs (`probe.*` in conf/doctor.yaml); defaults keep `make doctor` under 2 minutes."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from trainwell.errors import TrainwellError


@dataclass(frozen=True)
class ProbeSettings:
    accelerator: str = "cpu"  # probes run here; device.placement alone uses CUDA when present
    batch_size: int = 32  # samples in the fixed probe batch (the overfit batch)
    overfit_steps: int = 60  # optimizer steps on one fixed batch, at least
    overfit_max_steps: int = 600  # ... and on while the loss still falls, up to this many
    overfit_budget_s: float = 20.0  # ... or this many seconds
    overfit_max_ratio: float = 0.1  # pass when final loss <= ratio x initial loss
    scan_batches: int = 200  # batches per split scanned by data.finite / targets.contract
    leakage_max_samples: int = 100_000  # samples per split hashed by data.leakage
    throughput_batches: int = 8  # real train batches timed by data.throughput
    memory_steps: int = 6  # steps watched by memory.graph_leak
    # epoch: a scheduler stepping per optimizer step gets a warning (per-epoch was meant);
    # per-epoch stepping (Lightning's default interval) passes either way
    scheduler_interval: str = "step"
    window_batches: int = 8  # real micro-batches a manual-optimization probe watches for a step
    # Tiny probe nets: one intra-op thread. On a busy machine OpenMP's spinning threads made a
    # 30-step probe 15-25x slower (25.7 s with 2 threads vs 1.1 s with 1, measured).
    threads: int = 1

    @classmethod
    def from_cfg(cls, node: Any) -> ProbeSettings:
        values = dict(node or {})
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(values) - known):
            raise TrainwellError(
                f"unknown doctor setting(s) probe.{', probe.'.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        for name, value in values.items():
            kind = type(getattr(cls, name))
            # A mistyped value (probe.batch_size=abc) would otherwise pass here and crash a
            # probe minutes later; YAML gives 20 for 20.0, so an int is a float too.
            fits = isinstance(value, kind) or (kind is float and isinstance(value, int))
            if not fits or isinstance(value, bool):
                raise TrainwellError(f"probe.{name}={value!r} is invalid: expected {kind.__name__}")
        return cls(**values)
