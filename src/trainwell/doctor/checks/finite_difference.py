"""Gradients match the loss: central finite differences of the task's own training_step loss
agree with autograd on a few coordinates.

Run in float64 on a fresh task in eval mode (dropout off, BatchNorm on running statistics), so
the loss is a smooth, deterministic function of the weights. A custom autograd Function with a
wrong backward, a gradient hook left on a tensor, or part of the loss computed from `.data` or
detached weights makes the two disagree.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from trainwell.doctor.harness.batches import clone, restructure
from trainwell.doctor.harness.context import DoctorContext, quiet

COORDINATES = 2  # per tensor, on the (up to) 4 tensors with the largest gradients
SAMPLES = 4
STEP = 1e-6
RTOL = 1e-3


def _double(batch: Any) -> Any:
    return restructure(batch, lambda t: t.double() if t.is_floating_point() else t)


# What lets a probe call training_step on its own, outside a trainer.
ALONE = "return the loss from training_step without reading self.trainer or self.optimizers()"


def training_loss(task: Any, batch: Any) -> torch.Tensor:
    """The scalar loss training_step returns, outside a trainer (ValueError: none)."""
    out = task.training_step(copy.copy(batch), 0)
    loss = out.get("loss") if isinstance(out, dict) else out
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError("training_step returned no scalar loss")
    return loss


def finite_difference(ctx: DoctorContext) -> tuple[list[dict[str, Any]], str]:
    """(coordinates where autograd and the finite difference disagree, '') or ([], why the
    comparison could not run); each coordinate: tensor name, index, both values."""
    task = ctx.make_task()
    if not task.automatic_optimization:
        return [], "manual optimization: the loss is not what training_step returns"
    task = task.double().eval()
    # A few samples are enough for the derivative and keep 2 forwards per coordinate cheap.
    few = ctx.probe_indices[:SAMPLES] if ctx.probe_indices else None
    batch = _double(ctx.samples.collate(few) if few else clone(ctx.batch))
    try:
        with quiet():
            loss = training_loss(task, batch)
            if not loss.requires_grad:
                return [], "the loss has no graph (grad.flow reports it)"
            loss.backward()
            again = float(training_loss(task, batch).detach())
    except Exception as err:  # a step that needs the trainer (self.trainer, self.optimizers())
        return [], f"training_step cannot run outside the trainer ({type(err).__name__}); {ALONE}"
    if float(loss.detach()) != again:
        return [], "training_step's loss is random even in eval mode"
    params = {n: p for n, p in task.named_parameters() if p.grad is not None}
    ranked = sorted(params, key=lambda n: -float(params[n].grad.abs().max()))[:4]
    bad = []
    with torch.no_grad(), quiet():
        for name in ranked:
            p = params[name]
            for index in p.grad.abs().flatten().topk(min(COORDINATES, p.numel())).indices:
                flat, analytic = p.view(-1), float(p.grad.view(-1)[index])
                h = STEP * max(1.0, abs(float(flat[index])))
                flat[index] += h
                up = float(training_loss(task, batch))
                flat[index] -= 2 * h
                down = float(training_loss(task, batch))
                flat[index] += h
                numeric = (up - down) / (2 * h)
                if abs(numeric - analytic) > RTOL * max(abs(numeric), abs(analytic), 1e-6):
                    bad.append(
                        {
                            "tensor": name,
                            "index": int(index),
                            "autograd": analytic,
                            "finite_difference": numeric,
                        }
                    )
    return bad, ""
