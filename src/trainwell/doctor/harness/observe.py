"""The main probe run, shared by several checks: the task trains on one fixed batch.

One real fit of `probe.overfit_steps` optimizer steps (no accumulation) with a validation pass
half-way, recorded by `Recorder` and `Spy`. overfit.one_batch, grad.flow, grad.zeroing,
optimizer.coverage, train.mode, loss.logits, targets.contract, memory.graph_leak and
checkpoint.roundtrip all read it, so the user's hooks run once for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import lightning as L

from trainwell.doctor.harness.context import DoctorContext, FitResult, fixed_loader
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.harness.spy import Spy


@dataclass
class Observation:
    task: L.LightningModule
    fit: FitResult
    recorder: Recorder
    spy: Spy
    val_every: int


def observation(ctx: DoctorContext) -> Observation:
    cached = ctx.__dict__.get("_observation")
    if cached is not None:
        return cached
    steps = ctx.settings.overfit_steps
    x, y = ctx.batch
    task = ctx.make_task()
    spy = Spy()
    recorder = Recorder(spy=spy, watch_memory_steps=ctx.settings.memory_steps)
    val_every = max(1, steps // 2)
    fit = ctx.fit(
        task,
        fixed_loader(x, y, len(x), repeats=steps),
        callbacks=[recorder],
        max_steps=steps,
        val=fixed_loader(x, y, len(x)),
        val_every=val_every,
    )
    result = Observation(task, fit, recorder, spy, val_every)
    ctx.__dict__["_observation"] = result
    return result


def crashed_message(obs: Observation) -> str:
    return (
        f"the training step raised {obs.fit.error_line}; fix the failing check above first, "
        "then rerun the doctor"
    )
