"""checkpoint.roundtrip: a fresh task loaded from the probe run's checkpoint gives the trained
task's outputs and takes its next training step. checkpoint.partial_load: no
`load_state_dict(strict=False)` while the task is built loads nothing; strict=False returns missing
keys in a list nobody reads, so weights saved through a wrapper (`model.`, `module.` from DDP,
`_orig_mod.` from torch.compile) match no key and training silently starts from random weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest.mock import patch

import torch
from torch import nn

from trainwell.callbacks.checkpoint_rehearsal import rehearse
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import crashed_message, observation
from trainwell.doctor.harness.outputs import evaluation_outputs, output_differences
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips
from trainwell.errors import first_line
from trainwell.io.checkpoint_read import load_checkpoint_file


def checkpoint_roundtrip(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    obs = observation(ctx)
    if obs.fit.error is not None:
        return skips(crashed_message(obs))
    trainer = obs.fit.trainer
    # train.py's step-0 check: the same in-memory save (datamodule state included) read back by the
    # loader of resume, eval, predict and export; a value only pickled code could load fails here.
    rehearsal = rehearse(trainer, ctx.datamodule)
    if rehearsal.error is not None:
        return fails(f"{rehearsal.error}; train.py stops on it before the first training step")
    path = ctx.workdir / "roundtrip.ckpt"
    trainer.save_checkpoint(path, weights_only=False)  # full state, as ModelCheckpoint writes
    ckpt = rehearsal.loaded if rehearsal.loaded is not None else load_checkpoint_file(path)
    evidence |= {
        "keys": sorted(ckpt),
        "optimizer_states": len(ckpt.get("optimizer_states", [])),
        "optimizers": len(trainer.optimizers),
        "lr_schedulers": len(ckpt.get("lr_schedulers", [])),
        "schedulers": len(trainer.lr_scheduler_configs),
        "bytes": path.stat().st_size,
    }
    fresh = ctx.make_task(seed=int(ctx.cfg.seed) + 1)
    try:
        fresh.load_state_dict(ckpt["state_dict"], strict=True)
    except Exception as err:  # architecture/keys mismatch
        late = sorted(set(ckpt["state_dict"]) - set(fresh.state_dict()))
        fix = (
            f"`{late[0]}` is made after __init__ (in setup(), from the data): predict.py and "
            "export.py load into a task built from the config alone; create it in __init__ (a "
            "buffer or layer of its shape) and fill it in setup()"
            if late
            else "build the same architecture from the config"
        )
        return fails(
            f"the saved state_dict does not load into a fresh task: {first_line(err)}; {fix}"
        )
    trained, error = evaluation_outputs(ctx, obs.task, borrow_training_step=True)
    if trained is not None:
        loaded, error = evaluation_outputs(ctx, fresh, borrow_training_step=True)
    if trained is None or loaded is None:
        return skips(f"outputs could not be compared: {error}; the checkpoint itself loads")
    diffs = output_differences(trained.outputs, loaded.outputs)
    diff = max(diffs, default=0.0)
    evidence |= {"outputs_compared": len(diffs), "max_output_difference": diff}
    if not diffs:
        return skips(
            "evaluation calls no module that holds parameters, so no output was compared; the "
            "checkpoint itself loads (call the model in validation_step to compare outputs)"
        )
    if diff > 1e-6:
        return fails(
            f"a fresh task loaded from the checkpoint gives outputs {diff:.3g} away from the "
            "trained one: some state that changes the output is not saved (a plain tensor "
            "attribute or a non-persistent buffer); register it with register_buffer"
        )
    # From one RNG state, only state kept outside the checkpoint parts the two tasks' next steps.
    step, batches, after = int(ckpt.get("global_step", 0)), ctx.settings.window_batches, []
    for task in (obs.task, fresh):
        torch.manual_seed(int(ctx.cfg.seed))
        fit = ctx.fit(
            task,
            ctx.fixed_loader(repeats=batches),
            [],
            max_steps=step + 1,
            accumulate=ctx.accumulate,
            max_batches=batches,
            ckpt_path=path,
            max_epochs=-1,
        )
        if fit.error is not None:  # resuming itself failed: what the user's resume would meet
            return fails(
                f"resuming training from the checkpoint raised {fit.error_line}; a resumed run "
                "would stop there"
            )
        reached = fit.trainer.global_step > step
        after.append([p.detach().clone() for p in task.parameters()] if reached else None)
    if None in after:
        evidence["next_step_not_compared"] = (
            f"no optimizer step in the {batches} micro-batches after resuming (the task "
            "steps on a condition the probe batch never met)"
        )
    else:
        apart = max(output_differences(after[0], after[1]), default=0.0)
        evidence["max_next_step_difference"] = apart
        if apart > 1e-6:
            return fails(
                f"the trained task and a fresh one loaded from its checkpoint take different "
                f"next training steps (weights {apart:.3g} apart): state that shapes training "
                "(a step counter, a running average, a private torch.Generator) lives outside "
                "the checkpoint; register it with register_buffer or save it in on_save_checkpoint"
            )
    missing = []
    if evidence["optimizer_states"] < evidence["optimizers"]:
        missing.append("optimizer")
    if evidence["lr_schedulers"] < evidence["schedulers"]:
        missing.append("scheduler")
    if missing:
        return fails(
            f"the checkpoint lacks {' and '.join(missing)} state, so a resumed run restarts "
            "them from scratch; save with trainer.save_checkpoint (full state)"
        )
    unreached = evidence.get("next_step_not_compared")
    return passes(
        "a fresh task loaded from the checkpoint reproduces the outputs exactly, and the "
        "optimizer and scheduler state are saved"
        + (f"; the next training step was not compared: {unreached}" if unreached else "")
    )


@dataclass
class Load:
    module: str  # the class of the module loaded into
    strict: bool
    given: list[str]  # the keys of the state_dict passed in
    expected: int  # the keys the module has
    loaded: int  # keys that matched


@contextmanager
def watched_loads() -> Iterator[list[Load]]:
    """Record every nn.Module.load_state_dict call made inside the block (nested calls that a
    module's own load_state_dict makes on its children are recorded once, at the outer call)."""
    original = nn.Module.load_state_dict
    loads: list[Load] = []
    depth = [0]

    def load_state_dict(self: nn.Module, state_dict: Any, strict: bool = True, **kw: Any) -> Any:
        depth[0] += 1
        try:
            result = original(self, state_dict, strict=strict, **kw)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            # Matched keys are counted from what was given: BatchNorm fills a missing
            # num_batches_tracked itself, so missing_keys under-reports what was skipped.
            expected = set(self.state_dict().keys())
            given = [str(k) for k in state_dict]
            matched = len(expected & set(given))
            loads.append(Load(type(self).__name__, bool(strict), given, len(expected), matched))
        return result

    with patch.object(nn.Module, "load_state_dict", load_state_dict):
        yield loads


def checkpoint_partial_load(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    with watched_loads() as loads:
        ctx.make_task()
    evidence["loads_while_building"] = len(loads)
    evidence["loads"] = [
        {"into": x.module, "strict": x.strict, "given": len(x.given), "matched": x.loaded}
        for x in loads[:10]
    ]
    if not loads:
        return passes("building the task loads no state_dict, so no weights can be skipped")
    empty = [x for x in loads if not x.strict and x.given and x.expected and x.loaded == 0]
    if empty:
        x = empty[0]
        heads = {k.split(".", 1)[0] for k in x.given}  # the first dotted component all share
        prefix = f"{heads.pop()}." if len(heads) == 1 and all("." in k for k in x.given) else ""
        why = (
            f"every given key starts with `{prefix}` (saved through a wrapper)"
            if prefix
            else f"the given keys (first: `{x.given[0]}`) name none of its tensors"
        )
        return fails(
            f"load_state_dict(strict=False) into {x.module} while the task is built matched 0 of "
            f"its {x.expected} keys: {why}, so training starts from random weights; strip the "
            "prefix (str.removeprefix) and load with strict=True, or read the returned missing_keys"
        )
    return passes(
        f"{len(loads)} load_state_dict call(s) while building the task each matched the "
        "module's keys"
    )
