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

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import short_fit
from trainwell.doctor.harness.outputs import class_predictions
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips
from trainwell.errors import error_line

LEARNT = 0.2  # the fit must beat chance on training data by this much (and by 3 sigma)
HOOK = (
    "return one row of class scores per sample from forward on (input, class id) batches, or "
    "hand cross_entropy one class id per sample (or per position) in validation_step"
)


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


def data_split_agreement(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    try:
        val = ctx.datamodule.val_dataloader()
    except Exception as err:  # no validation split (Lightning raises for an unimplemented one)
        return skips(f"no validation split to compare: {error_line(err)}")
    steps = ctx.settings.overfit_steps
    train = ctx.samples.micro_batches(steps, 8) or ctx.samples.micro_batches(0, 8)
    task = ctx.make_task().eval()  # can it be scored at all (before paying for the fit)?
    for batches in (train[:1], val):
        why = class_predictions(ctx, task, [next(iter(batches), None)])
        if isinstance(why, str):
            return skips(f"no predictions to score: {why}; {HOOK}")
    task, fit = short_fit(ctx)
    if fit.error is not None:
        return skips(f"the short fit failed: {fit.error_line}")
    read = [class_predictions(ctx, task.eval(), train), class_predictions(ctx, task, val)]
    why = next((r for r in read if isinstance(r, str)), None)
    if why is not None:
        return skips(f"no predictions to score: {why}; {HOOK}")
    tr, va = (_rates(*r) for r in read)  # type: ignore[misc]
    evidence |= {"fit_steps": steps, "train": tr, "val": va}
    if tr["accuracy"] < tr["chance"] + max(LEARNT, tr["sigma3"]):
        return skips(
            f"the short fit ({steps} steps) reaches {tr['accuracy']:.2f} on training data, "
            f"not clearly above chance ({tr['chance']:.2f}): nothing learnt to compare; more "
            "probe.overfit_steps may get there"
        )
    if va["accuracy"] > va["chance"] + va["sigma3"]:
        return passes(
            f"after a short fit, accuracy beats chance on training data ({tr['accuracy']:.2f} "
            f"vs {tr['chance']:.2f}) and on validation ({va['accuracy']:.2f} vs "
            f"{va['chance']:.2f})"
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
    return fails(
        f"a short fit beats chance on training data ({tr['accuracy']:.2f} vs "
        f"{tr['chance']:.2f}) but validation stays at chance ({va['accuracy']:.2f} vs "
        f"{va['chance']:.2f}), {cause}"
    )
