"""The task's own loss, read two ways: the scalar training_step returns when called alone
(outside a trainer), and the loss-function calls the shared probe fit recorded."""

from __future__ import annotations

import copy
from typing import Any

import torch

from trainwell.doctor.harness.batches import leaves
from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.harness.observe import observation
from trainwell.doctor.harness.spy import LossCall

# What lets a probe call training_step on its own, outside a trainer.
ALONE = "return the loss from training_step without reading self.trainer or self.optimizers()"


def training_loss(task: Any, batch: Any) -> torch.Tensor:
    """The scalar loss training_step returns, outside a trainer (ValueError: none)."""
    out = task.training_step(copy.copy(batch), 0)
    loss = out.get("loss") if isinstance(out, dict) else out
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError("training_step returned no scalar loss")
    return loss


def eval_loss(task: Any, batch: Any, seed: int = 0) -> float:
    """training_step's loss on `batch` without grad (the task in eval mode: the caller's
    choice), randomness seeded alike and the global RNG left as it was."""
    with torch.random.fork_rng(devices=[]), torch.no_grad(), quiet():
        torch.manual_seed(seed)
        return float(training_loss(task, batch))


def first_loss(ctx: DoctorContext) -> LossCall | None:
    calls = observation(ctx).spy.losses
    return calls[0] if calls else None


def class_target(ctx: DoctorContext) -> str | None:
    """The tensor of the probe batch a class-index loss (cross_entropy, nll_loss) takes as its
    target, if it takes one: where a batch of any structure keeps its class ids."""
    call = first_loss(ctx)
    classes = call is not None and call.name in ("cross_entropy", "nll_loss")
    return target_path(ctx, call) if call is not None and classes else None


def target_path(ctx: DoctorContext, call: LossCall) -> str | None:
    """Which tensor of the probe batch the loss received as its target (same values, in any
    shape, dtype or order: `y`, `batch['targets'].flatten()`, `y.float()`, `y[order]` after a
    sort by length), if any; one with the values in the same order first."""
    target = call.target.reshape(-1).double()
    found = [
        (path, leaf.reshape(-1).double())
        for path, leaf in leaves(ctx.batch)
        if leaf.numel() == target.numel() and not leaf.is_complex()
    ]
    for same in (torch.equal, lambda a, b: torch.equal(a.sort().values, b.sort().values)):
        for path, values in found:
            if same(values, target):
                return path
    return None
