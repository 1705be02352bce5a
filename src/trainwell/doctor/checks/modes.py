"""Mode checks: training really runs in train mode, evaluation really runs in eval mode."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from trainwell.doctor.checks.finite_difference import training_loss
from trainwell.doctor.harness.batches import replay_loader
from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.harness.inspection import frozen_modules
from trainwell.doctor.harness.observe import crashed_message, observation
from trainwell.doctor.harness.outputs import evaluation_outputs, output_differences
from trainwell.doctor.report.verdict import Check


def train_mode(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    rec = obs.recorder
    if not rec.losses and obs.fit.error is not None:
        return Check("train.mode", "skip", crashed_message(obs))
    evidence: dict[str, Any] = {
        "batches_checked": len(rec.losses),
        "validation_after_batch": obs.val_every,
        "batches_with_eval_modules": len(rec.eval_modules),
    }
    # A frozen block kept in eval mode (its BatchNorm statistics fixed) is deliberate.
    frozen = tuple(frozen_modules(obs.task))
    in_eval = [
        (b, kept)
        for b, names in rec.eval_modules
        if (kept := [n for n in names if not any(n == f or n.startswith(f"{f}.") for f in frozen)])
    ]
    if in_eval:
        batch, names = in_eval[0]
        after_val = batch >= obs.val_every and not any(b < obs.val_every for b, _ in in_eval)
        evidence |= {"first_batch": batch, "modules": names[:20], "module_count": len(names)}
        when = "after validation" if after_val else f"from training batch {batch}"
        return Check(
            "train.mode",
            "fail",
            f"{len(names)} module(s) (first: `{names[0]}`) run in eval mode {when}, so BatchNorm "
            "uses stale running statistics and dropout is off while training; do not call "
            ".eval() on the model outside validation (Lightning restores the mode it found)",
            evidence,
        )
    return Check(
        "train.mode",
        "pass",
        f"every module is in train mode at all {len(rec.losses)} training batches, before and "
        "after validation",
        evidence,
    )


def _metric_drift(
    first: dict[str, float], other: dict[str, float], again: dict[str, float]
) -> dict[str, tuple[float, float]]:
    """Logged values that differ between two passes over the same batch. A value that equals
    the best of the two batches' values is a running best (MaxMetric, `val/acc_best`): kept."""
    drift = {}
    for key, a in first.items():
        b, between = again.get(key, a), other.get(key, a)
        same = abs(a - b) <= 1e-6 * (1 + abs(a)) or (math.isnan(a) and math.isnan(b))
        if same or b in (max(a, between), min(a, between)):
            continue
        drift[key] = (a, b)
    return drift


def _stage_passes(ctx: DoctorContext, task: Any, stage: str) -> tuple[list[Any], str]:
    """The probe batch evaluated, then another batch, then the probe batch again: state a pass
    leaves behind (an unreset metric, a list of losses) shows in the third pass."""
    other = ctx.samples.micro_batches(1, 1)
    loaders = [None, replay_loader(other) if other else None, None]
    passes = []
    for i, loader in enumerate(loaders):
        if i == 1 and loader is None:
            passes.append(passes[0])
            continue
        watch, error = evaluation_outputs(ctx, task, loader=loader, stage=stage)
        if watch is None:
            return [], error
        passes.append(watch)
    return passes, ""


def eval_determinism(ctx: DoctorContext) -> Check:
    """Same weights, same data, same numbers: outputs and every logged value of validation
    (and of test, where there is a test_step) repeat exactly, whatever ran in between."""
    stages = [
        s
        for s in ("validate", "test")
        if ctx.has_hook(f"{s}_step".replace("validate", "validation"))
    ]
    if not stages:
        return Check(
            "eval.determinism",
            "skip",
            "the task defines no validation_step or test_step, so there is no evaluation to check",
        )
    task = observation(ctx).task
    evidence: dict[str, Any] = {}
    for stage in stages:
        name = "validation" if stage == "validate" else "test"
        passes, error = _stage_passes(ctx, task, stage)
        if not passes:  # the user's evaluation code failed: that is the finding
            return Check("eval.determinism", "fail", f"{error}; fix {name}_step")
        a, other, b = passes
        diffs = output_differences(a.outputs, b.outputs)
        max_diff = max(diffs) if diffs else 0.0
        in_train = sorted(a.training_modules | b.training_modules)
        drift = _metric_drift(a.metrics, other.metrics, b.metrics)
        evidence[stage] = {
            "outputs_compared": len(diffs),
            "max_abs_difference": max_diff,
            "modules_in_train_mode": in_train[:20],
            "metrics_compared": len(a.metrics),
            "metrics_that_moved": drift,
        }
        if max_diff > 1e-6 or in_train:
            cause = (
                f"{len(in_train)} module(s) (first: `{in_train[0]}`) run in train mode during {name}"
                if in_train
                else "hidden randomness in the forward"
            )
            return Check(
                "eval.determinism",
                "fail",
                f"two {name} passes over the same batch differ by {max_diff:.3g}: {cause} (dropout "
                f"active, BatchNorm on batch statistics); do not call self.train() in {name} code "
                "and keep randomness out of eval forward",
                evidence,
            )
        if drift:
            key, (v1, v2) = next(iter(drift.items()))
            return Check(
                "eval.determinism",
                "fail",
                f"two {name} passes over the same batch with the same weights log `{key}` as "
                f"{v1:.6g} and then {v2:.6g} ({len(drift)} value(s) moved): state kept from an "
                "earlier pass (a metric never reset, a list never cleared) or randomness feeds "
                "the logged value; reset metrics after compute() or log the torchmetrics object",
                evidence,
            )
    if not any(e["outputs_compared"] or e["metrics_compared"] for e in evidence.values()):
        return Check(
            "eval.determinism",
            "skip",
            "evaluation logs nothing and calls no module that holds parameters, so nothing was "
            "compared; log a value or call the model in validation_step",
            evidence,
        )
    return Check(
        "eval.determinism",
        "pass",
        f"two {' and '.join(evidence).replace('validate', 'validation')} passes over the same batch give "
        "identical outputs and logged values, with every module in eval mode",
        evidence,
    )


# Outputs of one sample computed in batches of different sizes differ by float rounding only
# (another kernel blocking); a layer that normalises over the batch moves them by far more.
BATCH_RTOL = 1e-4
# The same samples' loss reordered or regrouped differs by float32 summation order only.
LOSS_RTOL = 2e-5
ID = "eval.batch_independence"
# InstanceNorm is left out: its eval statistics are each sample's own, never the batch's.
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def _batch_statistics_layers(task: nn.Module) -> list[str]:
    """Norm layers that normalise with the batch's own statistics in eval mode."""
    return [
        name
        for name, m in task.named_modules()
        if isinstance(m, BATCH_NORMS) and (not m.track_running_stats or m.running_mean is None)
    ]


def _sample_shift(full: list[torch.Tensor], part: list[torch.Tensor], n: int, k: int) -> float:
    """Max change of the first k samples' outputs when they are evaluated without the rest.
    An output of n * m rows (per-token logits flattened to (batch * tokens, vocab)) holds the
    first k samples in its first k * m rows; a (batch, tokens, ...) output padded to a longer
    batch is compared over the half batch's tokens."""
    shifts = []
    for p, q in zip(full, part, strict=False):
        if not (p.dim() and p.dim() == q.dim() and p.is_floating_point()):
            continue
        if p.dim() > 1 and p.shape[1] > q.shape[1] and p.shape[2:] == q.shape[2:]:
            # Sequences padded to each batch's longest: the half batch's positions are a prefix.
            p = p[:, : q.shape[1]]
        if p.shape[1:] != q.shape[1:]:
            continue
        rows = p.shape[0] // n * k
        if p.shape[0] % n or q.shape[0] != rows or rows == 0:
            continue
        head = p[:rows].double()
        shifts.append(float((head - q.double()).abs().max() / (1.0 + head.abs().max())))
    return max(shifts, default=-1.0)


def _output_independence(ctx: DoctorContext) -> Check:
    """Evaluate the probe batch, then its first half alone: in eval mode a sample's outputs
    must not depend on which other samples share its batch."""
    cid = ID
    if not ctx.has_hook("validation_step"):
        return Check(cid, "skip", "the task defines no validation_step, so no evaluation to check")
    indices = ctx.probe_indices
    if indices is None or len(indices) < 4:
        return Check(cid, "skip", "the probe batch cannot be rebuilt at a smaller size")
    n, k = len(indices), len(indices) // 2
    task = observation(ctx).task
    half = replay_loader([ctx.samples.collate(indices[:k])])
    runs = [evaluation_outputs(ctx, task)[0], evaluation_outputs(ctx, task)[0]]
    part, error = evaluation_outputs(ctx, task, loader=half)
    if runs[0] is None or runs[1] is None or part is None:
        return Check(cid, "skip", f"validation could not run: {error or 'see eval.determinism'}")
    repeat = max(output_differences(runs[0].outputs, runs[1].outputs), default=0.0)
    if repeat > 0:
        return Check(
            cid,
            "skip",
            "two validation passes over one batch already differ (eval.determinism reports "
            "it), so the batch's influence cannot be told apart",
        )
    shift = _sample_shift(runs[0].outputs, part.outputs, n, k)
    layers = _batch_statistics_layers(task)
    evidence: dict[str, Any] = {
        "batch": n,
        "half_batch": k,
        "max_relative_shift": shift,
        "batch_statistics_layers": layers[:10],
    }
    if shift < 0:
        return Check(
            cid, "skip", "no per-sample output of the evaluation could be compared", evidence
        )
    if shift > BATCH_RTOL:
        cause = (
            f"{len(layers)} norm layer(s) (first: `{layers[0]}`) keep no running statistics "
            "(track_running_stats=False), so eval normalises with each batch's own"
            if layers
            else "a layer mixes information across the batch in eval mode"
        )
        return Check(
            cid,
            "warn",
            f"in eval mode the first {k} samples' outputs change by {shift:.3g} (relative) when "
            f"evaluated without the other {n - k}: {cause}; predictions depend on batch size "
            "and neighbours (keep track_running_stats=True, or use GroupNorm/LayerNorm)",
            evidence,
        )
    return Check(
        cid,
        "pass",
        f"each sample's eval outputs are the same in a batch of {n} and of {k}",
        evidence,
    )


def _loss_of(task: Any, batch: Any, seed: int = 0) -> float:
    """training_step's loss on `batch`, in eval mode without grad, randomness seeded alike."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return float(training_loss(task, batch))


def _between(whole: float, a: float, b: float) -> bool:
    """Whether `whole` is a weighted mean (weights: samples, tokens, anything positive) of the
    two halves' losses, or their sum: a per-sample loss reduced either way lies there."""
    tol = LOSS_RTOL * (abs(a) + abs(b) + abs(whole) + 1e-12)
    return min(a, b) - tol <= whole <= max(a, b) + tol or abs(whole - (a + b)) <= tol


def _loss_independence(ctx: DoctorContext) -> Check:
    """The loss training_step computes in eval mode must not read the batch's order (samples
    reversed), and the whole batch's loss must be a weighted mean (or the sum) of two halves'
    losses, for two different splits: otherwise a sample's loss depends on its companions."""
    indices = ctx.probe_indices
    if indices is None or len(indices) < 4:
        return Check(
            ID,
            "skip",
            "the probe batch cannot be rebuilt from dataset indices (an iterable dataset); a "
            "map-style training dataset (with __getitem__) lets the loss be regrouped and tested",
        )
    task = ctx.make_task()
    if not task.automatic_optimization:
        return Check(
            ID,
            "skip",
            "manual optimization: training_step returns no loss to compare; return the loss "
            "(it may also step) to test it",
        )
    task = task.eval()
    n = len(indices)
    splits = [(indices[: n // 2], indices[n // 2 :]), (indices[::2], indices[1::2])]
    try:
        with torch.no_grad(), quiet():
            whole = _loss_of(task, ctx.samples.collate(indices))
            again = _loss_of(task, ctx.samples.collate(indices))
            other_seed = _loss_of(task, ctx.samples.collate(indices), seed=1)
            reversed_ = _loss_of(task, ctx.samples.collate(indices[::-1]))
            twice = _loss_of(task, ctx.samples.collate(indices + indices))
            halves = [
                (_loss_of(task, ctx.samples.collate(a)), _loss_of(task, ctx.samples.collate(b)))
                for a, b in splits
            ]
    except Exception as err:  # a step that needs the trainer, or returns no loss
        return Check(ID, "skip", f"training_step's loss cannot be computed alone ({err})")
    evidence: dict[str, Any] = {
        "loss": whole,
        "loss_samples_reversed": reversed_,
        "loss_each_sample_twice": twice,
        "loss_of_halves": halves,
    }
    if whole != again:
        return Check(ID, "skip", "training_step's loss changes between two calls on one batch")
    if other_seed != whole:
        # Mixup, noise or random crops in the step: the same seed over another order draws
        # other numbers for each sample, so a moved loss would prove nothing.
        return Check(
            ID,
            "skip",
            "training_step draws random numbers (mixup, noise, augmentation), so its loss over "
            "another order cannot be compared; move them to the datamodule to test it",
        )
    if abs(reversed_ - whole) > LOSS_RTOL * (abs(whole) + 1e-12):
        return Check(
            ID,
            "fail",
            f"reversing the order of the {n} samples in the batch moves training_step's loss "
            f"from {whole:.6g} to {reversed_:.6g} (eval mode, same seed): the loss reads the "
            "batch order (weights by position, a sort that leaves labels behind, a cumulative "
            "op or softmax over the batch axis)",
            evidence,
        )
    # Every sample twice: a mean (by samples or tokens) stays, a sum doubles.
    tol = LOSS_RTOL * (abs(whole) + 1e-12)
    doubled = min(abs(twice - whole), abs(twice - 2 * whole)) > tol
    bad = [(a, b) for (a, b) in halves if not _between(whole, a, b)]
    if (doubled or bad) and not _batch_statistics_layers(task):  # those: the outputs' finding
        seen = (
            f"with every sample twice it is {twice:.6g}"
            if doubled
            else f"its halves' losses are {bad[0][0]:.6g} and {bad[0][1]:.6g}"
        )
        return Check(
            ID,
            "warn",
            f"the batch's training loss is {whole:.6g} and {seen}, which no mean or sum of "
            "per-sample losses gives (eval mode): a sample's loss depends on its batch "
            "companions (inputs or losses normalised by batch statistics); in-batch negatives "
            "of a contrastive loss do this by design",
            evidence,
        )
    return Check(
        ID,
        "pass",
        "training_step's loss ignores the batch order and is a mean or sum of per-sample "
        "losses (halves and doubled samples agree)",
        evidence,
    )


_RANK = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}


def eval_batch_independence(ctx: DoctorContext) -> Check:
    """A sample's eval outputs and its training loss do not depend on what it is batched with."""
    outputs, loss = _output_independence(ctx), _loss_independence(ctx)
    worst = max((outputs, loss), key=lambda c: _RANK[c.status])
    evidence = {"outputs": outputs.evidence, "loss": loss.evidence}
    if worst.status in ("pass", "skip") and outputs.status == loss.status:
        return Check(ID, worst.status, f"{outputs.message}; {loss.message}", evidence)
    return Check(ID, worst.status, worst.message, evidence)
