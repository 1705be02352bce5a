"""What the task computes in evaluation: outputs of the task and its children on the probe batch.

Forward hooks on the task and on each top-level child with parameters capture whatever the
user's validation_step calls (`self(x)`, `self.net(...)`), and which modules run in train mode
while validating; from them, predicted and true class ids of a fitted task on any batches."""

from __future__ import annotations

from functools import partial
from typing import Any

import lightning as L
import torch
from torch import nn

from trainwell.doctor.harness.batches import leaves, padding_positions, replay_loader, size_of
from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.harness.spy import CLASS_INDEX, Spy
from trainwell.errors import error_line


class OutputWatch(L.Callback):
    def __init__(self) -> None:
        self.training_modules: set[str] = set()
        self.outputs: list[torch.Tensor] = []
        self.metrics: dict[str, float] = {}  # every value the pass logged
        self.handles: list[Any] = []  # removed by evaluation_outputs, however the pass ends

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        children = [m for m in pl_module.children() if any(True for _ in m.parameters())]
        watched = {id(pl_module), *map(id, children)}
        for name, m in pl_module.named_modules():
            hook = partial(self._hook, name or "task", id(m) in watched)
            self.handles.append(m.register_forward_hook(hook))

    def _hook(self, name: str, keep: bool, module: nn.Module, args: Any, output: Any) -> None:
        if module.training:
            self.training_modules.add(name)
        if keep:
            self.outputs.extend(t.detach().clone() for _, t in leaves(output))

    on_test_start = on_validation_start


def evaluation_outputs(
    ctx: DoctorContext,
    task: L.LightningModule,
    borrow_training_step: bool = False,
    loader: Any = None,
    stage: str = "validate",
) -> tuple[OutputWatch | None, str]:
    """Validate (or `stage="test"`: test) `task` on the probe batch (or on `loader`); (the
    watch, '') or (None, why it could not run). `borrow_training_step`: a task without
    validation_step is evaluated through its training_step (no_grad, eval mode, no step)."""
    borrowed = stage == "validate" and not ctx.has_hook("validation_step")
    if borrowed and not borrow_training_step:
        return None, "the task has no validation_step"
    if borrowed:
        task.validation_step = task.training_step  # type: ignore[method-assign]
    watch = OutputWatch()
    trainer = ctx.trainer(callbacks=[watch], limit_val_batches=1.0)
    # Lightning puts back each module's train/eval mode only when the pass ends normally: a step
    # that raises leaves the task in eval mode, with the watch's hooks on it, and every check
    # after this one would then train an eval-mode task (BatchNorm on running statistics).
    modes = [(m, m.training) for m in task.modules()]
    try:
        with quiet():
            dm = ctx.probe_data(val=ctx.fixed_loader() if loader is None else loader)
            results = getattr(trainer, stage)(task, datamodule=dm, verbose=False, weights_only=True)
        watch.metrics = {k: float(v) for r in results for k, v in r.items()}
    except Exception as err:  # the user's evaluation code failed: the caller reports it
        via = {"validate": "validation"}.get(stage, stage)
        via = "training_step run as an evaluation step" if borrowed else via
        return None, f"{via} raised {error_line(err)}"
    finally:
        if borrowed:
            del task.validation_step
        for handle in watch.handles:
            handle.remove()
        for module, training in modes:
            module.training = training
    return watch, ""


def output_differences(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[float]:
    """Max |a - b| per pair of same-shaped, non-empty outputs (any dtype, bool included)."""
    return [
        float((p.double() - q.double()).abs().max())
        for p, q in zip(a, b, strict=False)
        if p.shape == q.shape and p.numel()
    ]


SAMPLES = 256  # scored per split


def _forward_scores(task: Any, batches: list[Any]) -> tuple[torch.Tensor, torch.Tensor] | str:
    """Predicted and true class ids of (input, label) batches, read from forward."""
    predicted, labels = [], []
    for batch in batches:
        if not isinstance(batch, list | tuple) or len(batch) != 2:
            return "batches are not (input, label) pairs"
        x, y = batch
        if not isinstance(y, torch.Tensor) or y.dim() != 1 or y.is_floating_point() or y.min() < 0:
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


def _loss_scores(
    ctx: DoctorContext, task: Any, batches: list[Any]
) -> tuple[torch.Tensor, torch.Tensor] | str:
    """Predicted and true class ids of batches of any structure (dicts, nested), read from the
    scores and labels the task's own evaluation step hands a class-index loss: one per sample,
    or one per position (tokens, tags), where ignored labels and padded positions don't count."""
    with Spy(max_calls=4 * len(batches)) as spy:
        spy.active = True
        loader = replay_loader(batches)
        _, why = evaluation_outputs(ctx, task, borrow_training_step=True, loader=loader)
    if why:
        return why
    calls = [c for c in spy.losses if c.name in CLASS_INDEX]
    read = [_call_ids(c, b) for c, b in zip(calls, batches, strict=False)]
    if len(calls) != len(batches) or any(r is None for r in read):
        return "the evaluation step hands no class-index loss one class id per sample or position"
    return torch.cat([r[0] for r in read]), torch.cat([r[1] for r in read])  # type: ignore[index]


def _call_ids(call: Any, batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(predicted, true) class ids of one loss call: scores (N, C) against N labels, or (N, C, ...)
    against (N, ...) labels, one per position. None: not class scores against class ids."""
    scores, target = call.input, call.target
    per_item = scores.shape[:1] + scores.shape[2:]
    if scores.dim() < 2 or target.is_floating_point() or target.shape != per_item:
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
