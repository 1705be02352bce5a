"""data.split_agreement: validation measures what training learns.

The task fitted briefly on the real train batches (the context's short fit) predicts training
batches and the first validation batches, each scored against its own split's chance: the rate of
its most common label. A fit that beats chance on training data but leaves validation at chance
means validation does not measure what training learns: its labels were split from their inputs
(shuffled apart, zipped from two loaders) or its label ids name other classes (a label map built
per split; then a relabelling of the validation classes agrees with the predictions).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.report.verdict import Check
from trainwell.errors import error_line

ID = "data.split_agreement"
SAMPLES = 256  # scored per split
LEARNT = 0.2  # the fit must beat chance on training data by this much (and by 3 sigma)
HOOK = "yield (input, class id) batches and return one row of class scores from forward"


def _scores(task: Any, batches: Any) -> tuple[torch.Tensor, torch.Tensor] | str:
    """Predicted and true class ids over up to SAMPLES samples, or why they cannot be read."""
    predicted, labels = [], []
    for batch in batches:
        if batch is None:
            return "the split yields no batches"
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
        if sum(len(t) for t in labels) >= SAMPLES:
            break
    if not labels:
        return "the split yields no batches"
    return torch.cat(predicted), torch.cat(labels)


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
        why = _scores(task, [next(iter(batches), None)])
        if isinstance(why, str):
            return Check(ID, "skip", f"no predictions to score: {why}; {HOOK}", {})
    task, fit = ctx.short_fit
    if fit.error is not None:
        return Check(ID, "skip", f"the short fit failed: {fit.error_line}", {})
    read = [_scores(task.eval(), train), _scores(task, val)]
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
