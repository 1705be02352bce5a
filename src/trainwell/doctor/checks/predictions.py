"""data.split_agreement and data.class_balance: what a task fitted briefly on the real train
batches predicts."""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

import torch

from trainwell.doctor.harness.batches import ConcatError, concat, leaves, replay_loader, rows
from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.harness.observe import class_target, no_classes, short_fit, training_loss
from trainwell.doctor.harness.outputs import class_predictions
from trainwell.doctor.harness.samples import iterate_batches, order_source
from trainwell.doctor.harness.spy import CLASS_INDEX, Spy
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns
from trainwell.errors import TrainwellError, error_line
from trainwell.loading.labels import class_counts, dataset_labels

LEARNT = 0.2  # the fit must beat chance on training data by this much (and by 3 sigma)
IMBALANCE_RATIO = 5.0
LABEL_LIMIT = 200_000  # samples loaded one by one to read labels from a dataset without them
MACRO_WORDS = ("balanced", "macro", "f1", "recall")


def _rates(pred: torch.Tensor, true: torch.Tensor) -> dict[str, float]:
    """Accuracy, chance (the majority label's rate), 3 sigma of chance, and the accuracy under
    the best relabelling (each predicted class read as the label it is most often)."""
    n, chance = len(true), float(torch.bincount(true).max()) / len(true)
    keys, counts = torch.stack([pred, true], dim=1).unique(dim=0, return_counts=True)
    best = counts.new_zeros(int(pred.max()) + 1).scatter_reduce(0, keys[:, 0], counts, "amax")
    return {
        "samples": n,
        "accuracy": float((pred == true).float().mean()),
        "chance": chance,
        "sigma3": 3 * math.sqrt(chance * (1 - chance) / n),
        "relabelled_accuracy": int(best.sum()) / n,
    }


def data_split_agreement(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    if values := no_classes(ctx):
        return skips(f"{values}: no class predictions to score against chance")
    try:
        val = ctx.datamodule.val_dataloader()
    except Exception as err:  # no validation split (Lightning raises for an unimplemented one)
        return skips(f"no validation split to compare: {error_line(err)}")
    steps = ctx.settings.overfit_steps
    train = ctx.samples.micro_batches(steps, 8) or ctx.samples.micro_batches(0, 8)
    task = ctx.make_task().eval()  # can it be scored at all (before paying for the fit)?
    read = (class_predictions(ctx, task, [next(iter(b), None)]) for b in (train[:1], val))
    why = next((r for r in read if isinstance(r, str)), None)
    if why is None:
        task, fit = short_fit(ctx)
        if fit.error is not None:
            return skips(f"the short fit failed: {fit.error_line}")
        read = [class_predictions(ctx, task.eval(), train), class_predictions(ctx, task, val)]
        why = next((r for r in read if isinstance(r, str)), None)
    if why is not None:
        return skips(
            f"no predictions to score: {why}; return one row of class scores per sample from "
            "forward on (input, class id) batches, or hand cross_entropy one class id per sample "
            "(or per position) in validation_step"
        )
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
            f"after a short fit, accuracy beats chance on training data ({tr['accuracy']:.2f} vs "
            f"{tr['chance']:.2f}) and on validation ({va['accuracy']:.2f} vs {va['chance']:.2f})"
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
        f"a short fit beats chance on training data ({tr['accuracy']:.2f} vs {tr['chance']:.2f}) "
        f"but validation stays at chance ({va['accuracy']:.2f} vs {va['chance']:.2f}), {cause}"
    )


def _streamed(ctx: DoctorContext, why: str) -> tuple[torch.Tensor, dict[int, list[Any]]]:
    """The class ids the train loader yields in one pass (LABEL_LIMIT at most), and up to
    probe.batch_size samples per class; `why`: why the dataset's own labels could not be read."""
    found: list[torch.Tensor] = []
    kept: dict[int, list[Any]] = {}
    path = class_target(ctx)
    for batch in iterate_batches(ctx.samples.loader):
        y = dict(leaves(batch)).get(path)
        if not torch.is_tensor(y) or y.dim() != 1 or y.is_floating_point() or y.dtype == torch.bool:
            raise TrainwellError(
                f"{why}, and no tensor of its batches is a class id per sample; yield (input, "
                "class id) pairs, or pass the class ids to a cross-entropy loss"
            )
        found.append(y.detach().cpu().long())
        for i, c in enumerate(found[-1].tolist()):
            if len(kept.setdefault(c, [])) < ctx.settings.batch_size:
                kept[c].append(rows(batch, [i]))
        if sum(map(len, found)) >= LABEL_LIMIT:
            break
    return torch.cat(found) if found else torch.zeros(0, dtype=torch.long), kept


def data_class_balance(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    if values := no_classes(ctx):
        return skips(f"{values}: no class labels to count")
    kept: dict[int, list[Any]] | None = None  # samples by class, where they come from a stream
    try:
        labels, why = None, ctx.samples.why_not_indexable
        if not why:
            try:
                labels = dataset_labels(ctx.samples.loader.dataset, limit=LABEL_LIMIT)
            except TrainwellError as err:
                why = str(err).split(";")[0]  # its advice is the weighted sampler's
        if labels is None:
            # Dict records, (x, y, index) triples, a stream: the class ids are in its batches.
            labels, kept = _streamed(ctx, why)
        counts = class_counts(labels)
    except TrainwellError as err:
        return skips(f"no class labels to count: {error_line(err)}")
    present = counts[counts > 0]
    if len(present) < 2:
        return skips("the training split has fewer than two classes")
    ratio = float(present.max()) / float(present.min())
    majority = int(counts.argmax())
    evidence |= {
        "class_counts": counts.tolist(),
        "largest_to_smallest": round(ratio, 3),
        "threshold": IMBALANCE_RATIO,
        "samples_counted": len(labels),
    }
    if ratio < IMBALANCE_RATIO:
        return passes(f"the largest class is {ratio:.1f}x the smallest")
    batch = _balanced_batch(ctx, labels, counts, kept, evidence)
    task, fit = short_fit(ctx)
    if fit.error is not None:
        evidence["probe"] = f"the short fit raised {fit.error_line}"
    smallest = int(torch.where(counts > 0, counts, counts.max() + 1).argmin())
    if batch is not None and fit.error is None and _collapsed(ctx, task, batch, counts, evidence):
        return fails(
            f"after a short fit on the training split (class {majority}: {int(counts.max())} "
            f"samples, class {smallest}: {int(counts[smallest])}) the model predicts class "
            f"{majority} for every sample of a class-balanced batch: it learns the class "
            "frequencies, not the classes; use data.sampler=weighted or "
            "model.loss.class_weights=balanced"
        )
    compensation = []
    drawn = _drawn_ratio(ctx, labels, counts)
    if drawn is not None:
        evidence["drawn_largest_to_smallest"] = round(drawn, 3)
        if drawn < IMBALANCE_RATIO:  # a weighted sampler, the template's or the user's own
            sampler = type(order_source(ctx.samples.loader)).__name__
            compensation.append(
                f"the train loader's sampler, {sampler} (an epoch draws {drawn:.1f}:1)"
            )
    weighed = None if batch is None else _loss_weighed_ratio(task, batch, counts, evidence)
    if weighed is not None and weighed < IMBALANCE_RATIO:
        compensation.append(f"the loss's class weights (an epoch weighs {weighed:.1f}:1)")
    monitored = str((ctx.cfg.get("monitor") or {}).get("metric") or "")
    if any(word in monitored.lower() for word in MACRO_WORDS):
        compensation.append(f"monitor.metric={monitored}")
    evidence["compensated_by"] = compensation
    if compensation:
        return passes(
            f"the largest class is {ratio:.1f}x the smallest, compensated by "
            f"{', '.join(compensation)}"
        )
    return warns(
        f"class {majority} has {ratio:.1f}x the training samples of class {smallest} and nothing "
        "compensates, so accuracy can look fine while rare classes are never predicted; draw "
        "them evenly (a WeightedRandomSampler with one weight per sample in the train loader; "
        "data.sampler=weighted on the template's datamodules), weight the loss by class "
        "(model.loss.class_weights=balanced on its tasks), or monitor a macro metric "
        "(val/balanced_acc)"
    )


def _drawn_ratio(ctx: DoctorContext, labels: torch.Tensor, counts: torch.Tensor) -> float | None:
    """The largest class's draws over the smallest's in one epoch of the train loader's own
    sampler (inf if a class is never drawn); None where its indices are not dataset indices."""
    if ctx.samples.why_not_indexable:
        return None
    drawn = [i for batch in ctx.samples.index_batches() for i in batch]
    if not drawn or not all(isinstance(i, Integral) and 0 <= i < len(labels) for i in drawn):
        return None  # keys a dataset maps, not positions in it
    per_class = torch.bincount(labels[torch.tensor(drawn)], minlength=len(counts))[counts > 0]
    return float(per_class.max()) / float(per_class.min()) if int(per_class.min()) else math.inf


def _balanced_batch(
    ctx: DoctorContext,
    labels: torch.Tensor,
    counts: torch.Tensor,
    kept: dict | None,
    evidence: dict[str, Any],
) -> Any:
    """Up to probe.batch_size training samples, as many of each class (None: not joinable)."""
    classes = torch.nonzero(counts).reshape(-1).tolist()
    per_class = max(1, min(int(counts[counts > 0].min()), ctx.settings.batch_size // len(classes)))
    if kept is not None:
        try:
            return concat([row for c in classes for row in kept[c][:per_class]])
        except ConcatError:
            evidence["probe"] = "the samples of each class cannot be joined into one batch"
            return None
    generator = torch.Generator().manual_seed(int(ctx.cfg.seed))
    indices = []
    for c in classes:
        members = torch.nonzero(labels == c).reshape(-1)
        indices.extend(members[torch.randperm(len(members), generator=generator)[:per_class]])
    return ctx.samples.collate([int(i) for i in indices])


def _collapsed(
    ctx: DoctorContext, task: Any, batch: Any, counts: torch.Tensor, evidence: dict[str, Any]
) -> bool:
    read = class_predictions(ctx, task.eval(), replay_loader([batch]))
    if isinstance(read, str):
        evidence["probe"] = f"predictions not read: {read}"
        return False
    predicted = torch.bincount(read[0], minlength=len(counts))
    evidence["probe"] = {
        "fit_steps": ctx.settings.overfit_steps,
        "balanced_batch": len(read[1]),
        "predicted_counts": predicted.tolist(),
    }
    # Onto the majority class: the class frequencies learnt, not a net that is merely untrained.
    return int((predicted > 0).sum()) == 1 and int(predicted.argmax()) == int(counts.argmax())


def _loss_weighed_ratio(
    task: Any, batch: Any, counts: torch.Tensor, evidence: dict[str, Any]
) -> float | None:
    """The largest class's weight in an epoch's loss over the smallest's: its samples times the
    weight the loss gives each, read from the gradient a sample's true-class score gets over an
    unweighted cross-entropy's; None where the loss takes no class scores per sample."""
    # The fitted task, off its finished trainer (whose logging would refuse the step's log calls)
    spy, trainer, task.trainer = Spy(max_calls=1, keep_inputs=True), task.trainer, None
    try:
        with torch.enable_grad(), quiet(), spy:
            spy.active = True
            loss = training_loss(task, batch)
    except Exception as err:  # the user's step outside a trainer: no weights read, no verdict
        evidence["loss_weights"] = f"not read: {error_line(err)}"
        return None
    finally:
        task.trainer = trainer
    call = spy.losses[0] if spy.losses else None
    if call is None or call.name not in CLASS_INDEX or call.live is None or call.live.dim() != 2:
        return None
    y, scores = call.target.cpu(), call.live
    if y.is_floating_point() or not 0 <= int(y.min()) <= int(y.max()) < len(counts):
        return None  # class probabilities, ignored or unknown ids
    grad = torch.autograd.grad(loss, scores, allow_unused=True)[0] if scores.requires_grad else None
    if grad is None:
        return None
    # d loss / d true-class score, unweighted: p - 1 on logits, -1 on log-probabilities
    rows = torch.arange(len(y))
    p = scores.detach().cpu().float().softmax(1)[rows, y]
    plain = p - 1 if call.name == "cross_entropy" else torch.full_like(p, -1.0)
    sure = plain.abs() > 1e-3  # a sample already scored at p = 1 tells no weight
    weight = (grad.cpu()[rows, y].float() / plain)[sure]
    per_class = torch.zeros(len(counts)).index_add_(0, y[sure], weight)
    per_class /= torch.bincount(y[sure], minlength=len(counts)).clamp(min=1)
    if not bool((per_class[counts > 0] > 0).all()):
        return None
    evidence["loss_class_weights"] = (
        (per_class / per_class[counts > 0].min()).round(decimals=4).tolist()
    )
    weighed = (counts * per_class)[counts > 0]
    return float(weighed.max() / weighed.min())
