"""Predicted and true class ids of a fitted task on any batches: from forward on (input, class
id) pairs, or from the class scores and labels the task's own evaluation step hands a
class-index loss (one per sample, or one per position: tokens, tags)."""

from __future__ import annotations

from typing import Any

import torch

from trainwell.doctor.harness.batches import padding_positions, replay_loader, size_of
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.outputs import evaluation_outputs
from trainwell.doctor.harness.spy import Spy
from trainwell.errors import error_line

SAMPLES = 256  # scored per split


def _forward_scores(task: Any, batches: list[Any]) -> tuple[torch.Tensor, torch.Tensor] | str:
    """Predicted and true class ids of (input, label) batches, read from forward."""
    predicted, labels = [], []
    for batch in batches:
        if not isinstance(batch, list | tuple) or len(batch) != 2:
            return "batches are not (input, label) pairs"
        x, y = batch
        if not _class_ids(y):
            return "labels are not one class id per sample"
        try:
            with torch.no_grad():
                scores = task(x.to(task.device))
        except Exception as err:  # a task without a usable forward: no verdict
            return f"the task's forward raised {error_line(err)}"
        if not isinstance(scores, torch.Tensor) or scores.shape[:1] != y.shape or scores.dim() != 2:
            return "forward does not return one row of class scores per sample"
        predicted.append(scores.argmax(dim=1).cpu())
        labels.append(y.cpu())
    return torch.cat(predicted), torch.cat(labels)


def _class_ids(y: Any) -> bool:
    return (
        isinstance(y, torch.Tensor) and y.dim() == 1 and not y.is_floating_point() and y.min() >= 0
    )


def _loss_scores(
    ctx: DoctorContext, task: Any, batches: list[Any]
) -> tuple[torch.Tensor, torch.Tensor] | str:
    """Predicted and true class ids of batches of any structure (dicts, nested), read from the
    scores and labels the task's own evaluation step hands a class-index loss: one per sample,
    or one per position (tokens, tags), where ignored labels and padded positions don't count."""
    spy = Spy(max_calls=4 * len(batches))
    with spy:
        spy.active = True
        _, why = evaluation_outputs(
            ctx, task, borrow_training_step=True, loader=replay_loader(batches)
        )
    if why:
        return why
    calls = [c for c in spy.losses if c.name in ("cross_entropy", "nll_loss")]
    read = [_call_ids(c, b) for c, b in zip(calls, batches, strict=False)]
    if len(calls) != len(batches) or any(r is None for r in read):
        return "the evaluation step hands no class-index loss one class id per sample or position"
    return torch.cat([r[0] for r in read]), torch.cat([r[1] for r in read])  # type: ignore[index]


def _call_ids(call: Any, batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(predicted, true) class ids of one loss call: scores (N, C) against N labels, or (N, C, ...)
    against (N, ...) labels, one per position. None: not class scores against class ids."""
    scores, target = call.input, call.target
    if (
        scores.dim() < 2
        or target.is_floating_point()
        or target.shape != (scores.shape[:1] + scores.shape[2:])
    ):
        return None
    predicted, true = scores.argmax(dim=1).flatten(), target.flatten()
    keep = true >= 0  # a negative label (the usual ignore_index, -100) names no class
    if call.ignore_index is not None:
        keep &= true != call.ignore_index
    padding = padding_positions(batch)
    per_position = true.numel() != size_of(batch)
    if per_position and padding is not None and padding.pad.numel() == true.numel():
        keep &= ~padding.pad.to(true.device).flatten()  # what the model makes of padding: no score
    return (predicted[keep].cpu(), true[keep].cpu()) if bool(keep.any()) else None


def class_predictions(
    ctx: DoctorContext, task: Any, loader: Any
) -> tuple[torch.Tensor, torch.Tensor] | str:
    """Predicted and true class ids over up to SAMPLES samples, or why they cannot be read."""
    batches: list[Any] = []
    for batch in loader:
        if batch is None:
            break
        batches.append(batch)
        if sum(size_of(b) or 0 for b in batches) >= SAMPLES:
            break
    if not batches:
        return "the split yields no batches"
    read = _forward_scores(task, batches)
    return read if not isinstance(read, str) else _loss_scores(ctx, task, batches)
