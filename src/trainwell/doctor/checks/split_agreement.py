"""data.split_agreement: validation measures what training learns.

The task fitted briefly on the real train batches (the context's short fit) predicts training
batches and the first validation batches, each scored against its own split's chance: the rate of
its most common label. Predictions come from forward on (input, label) pairs, or, for batches of
any other structure (dicts, nested), from the class scores and labels the task's own evaluation
step hands its class-index loss, where labels per position (tokens, tags) are scored position by
position. A fit that beats chance on training data but leaves validation at chance means
validation does not measure what training learns: its labels were split from their inputs
(shuffled apart, zipped from two loaders) or its label ids name other classes (a label map built
per split; then a relabelling of the validation classes agrees with the predictions).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainwell.doctor.harness.batches import padding_positions, replay_loader, size_of
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.outputs import evaluation_outputs
from trainwell.doctor.harness.spy import Spy
from trainwell.doctor.report.verdict import Check
from trainwell.errors import error_line

ID = "data.split_agreement"
SAMPLES = 256  # scored per split
LEARNT = 0.2  # the fit must beat chance on training data by this much (and by 3 sigma)
HOOK = (
    "return one row of class scores per sample from forward on (input, class id) batches, or "
    "hand cross_entropy one class id per sample (or per position) in validation_step"
)


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


def _rates(pred: torch.Tensor, true: torch.Tensor) -> dict[str, float]:
    """Accuracy, chance (the majority label's rate), 3 sigma of chance, and the accuracy under
    the best relabelling (each predicted class read as the label it is most often)."""
    n, chance = len(true), float(torch.bincount(true).max()) / len(true)
    pairs = torch.stack([pred, true], dim=1).unique(dim=0, return_counts=True)
    best: dict[int, int] = {}
    for (p, _), count in zip(pairs[0].tolist(), pairs[1].tolist(), strict=True):
        best[p] = max(best.get(p, 0), count)
    return {
        "samples": n,
        "accuracy": float((pred == true).float().mean()),
        "chance": chance,
        "sigma3": 3 * math.sqrt(chance * (1 - chance) / n),
        "relabelled_accuracy": sum(best.values()) / n,
    }


def data_split_agreement(ctx: DoctorContext) -> Check:
    try:
        val = ctx.datamodule.val_dataloader()
    except Exception as err:  # no validation split (Lightning raises for an unimplemented one)
        return Check(ID, "skip", f"no validation split to compare: {error_line(err)}", {})
    steps = ctx.settings.overfit_steps
    train = ctx.samples.micro_batches(steps, 8) or ctx.samples.micro_batches(0, 8)
    task = ctx.make_task().eval()  # can it be scored at all (before paying for the fit)?
    for batches in (train[:1], val):
        why = class_predictions(ctx, task, [next(iter(batches), None)])
        if isinstance(why, str):
            return Check(ID, "skip", f"no predictions to score: {why}; {HOOK}", {})
    task, fit = ctx.short_fit
    if fit.error is not None:
        return Check(ID, "skip", f"the short fit failed: {fit.error_line}", {})
    read = [class_predictions(ctx, task.eval(), train), class_predictions(ctx, task, val)]
    why = next((r for r in read if isinstance(r, str)), None)
    if why is not None:
        return Check(ID, "skip", f"no predictions to score: {why}; {HOOK}", {})
    tr, va = (_rates(*r) for r in read)  # type: ignore[misc]
    evidence: dict[str, Any] = {"fit_steps": steps, "train": tr, "val": va}
    if tr["accuracy"] < tr["chance"] + max(LEARNT, tr["sigma3"]):
        return Check(
            ID,
            "skip",
            f"the short fit ({steps} steps) reaches {tr['accuracy']:.2f} on training data, "
            f"not clearly above chance ({tr['chance']:.2f}): nothing learnt to compare; more "
            "probe.overfit_steps may get there",
            evidence,
        )
    if va["accuracy"] > va["chance"] + va["sigma3"]:
        return Check(
            ID,
            "pass",
            f"after a short fit, accuracy beats chance on training data ({tr['accuracy']:.2f} "
            f"vs {tr['chance']:.2f}) and on validation ({va['accuracy']:.2f} vs "
            f"{va['chance']:.2f})",
            evidence,
        )
    relabelled = va["relabelled_accuracy"] > va["chance"] + max(LEARNT, va["sigma3"])
    cause = (
        f"yet a relabelling of the validation classes would score {va['relabelled_accuracy']:.2f}"
        ": the label ids mean other classes in validation (a label map built per split); build "
        "one map and share it"
        if relabelled
        else "its labels are not the labels of its inputs (shuffled apart, two loaders zipped, "
        "read in another order); keep each input with its label"
    )
    return Check(
        ID,
        "fail",
        f"a short fit beats chance on training data ({tr['accuracy']:.2f} vs "
        f"{tr['chance']:.2f}) but validation stays at chance ({va['accuracy']:.2f} vs "
        f"{va['chance']:.2f}), {cause}",
        evidence,
    )
