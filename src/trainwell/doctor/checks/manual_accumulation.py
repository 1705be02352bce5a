"""accumulation.equivalence under manual optimization: a probe fit watches where the user's code
zeroes and steps (`StepWatch`) and compares each optimizer's first step with one batch."""

from __future__ import annotations

from typing import Any

import torch

from trainwell.doctor.harness.batches import ConcatError, replay_loader
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.recorder import Recorder
from trainwell.doctor.harness.spy import Spy
from trainwell.doctor.harness.windows import (
    RANDOM,
    RTOL,
    Grads,
    StepWatch,
    compare,
    moves_with_seed,
    one_batch,
    step_grads,
)
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns


def manual_equivalence(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    state = {n: t.clone() for n, t in ctx.make_task().state_dict().items()}
    limit = ctx.settings.window_batches
    batches = ctx.samples.micro_batches(0, limit)
    spy = Spy(max_calls=8 * limit)
    watch = StepWatch(spy)
    rec = Recorder(spy=spy, freeze_stochastic=True, spy_batches=limit)
    fit = ctx.fit(ctx.make_task(state=state), replay_loader(batches), [watch, rec], max_steps=-1)
    steps = {i: e for i in range(watch.optimizers) if (e := watch.first_step(i)) is not None}
    evidence |= {"optimization": "manual", "optimizers": watch.optimizers}
    evidence["events"] = [(e.kind, e.batch, e.optimizer) for e in watch.events[:20]]
    if not steps:
        why = fit.error_line or f"no optimizer.step() in the first {len(batches)} micro-batches"
        return skips(f"no manual step observed to compare: {why}")
    n = max(e.batch for e in steps.values()) + 1
    calls = [spy.calls_in(i) for i in range(n)]
    counts = [len(c) for c in calls]
    if any(c > 1 for c in counts) and counts == [spy.backward_batches.count(i) for i in range(n)]:
        return skips(
            f"training_step computes and backpropagates its loss {counts} times per micro-batch "
            "(an optimizer calling a closure, such as L-BFGS): a step is no window of "
            "micro-batch gradients, so there is nothing to compare"
        )
    if any(c != 1 for c in counts):
        return skips(
            f"training_step calls {counts} recognised loss function(s) per micro-batch; the "
            "doctor rebuilds one batch's loss only from exactly one (the weights of several "
            "terms cannot be told apart from an accumulation scale): compare by hand"
        )
    if any(c[0].reduction not in ("mean", "sum") for c in calls):
        return skips(
            "the loss uses reduction='none' and reduces it by hand: no reference to compare; "
            "reduce it with reduction='mean' or 'sum'"
        )
    # Per micro-batch, what the loss passed to backward is a multiple of the loss function's
    # output (None: not exactly one backward call, or a zero loss).
    scaled = [[v for b, v in spy.backward_values if b == i] for i in range(n)]
    scales = [
        s[0] / c[0].value if len(s) == 1 and c[0].value else None
        for s, c in zip(scaled, calls, strict=True)
    ]
    evidence |= {
        "items_per_micro_batch": [c[0].items for c in calls],
        "backward_scale_per_micro_batch": scales,
        "micro_batches_per_window": {i: e.batch + 1 for i, e in steps.items()},
        "micro_batches_in_first_window": n,
    }
    # One and the same multiple in every micro-batch makes the reference (that multiple) known.
    if None in scales or max(scales) - min(scales) > 1e-5 * max(abs(s) for s in scales):  # type: ignore[type-var,operator,arg-type]
        return skips(
            "the loss passed to backward is not a fixed multiple of the recognised loss "
            "function's output (other terms, or several backward calls per micro-batch): no "
            "reference to compare with; backpropagate one loss output per micro-batch, scaled as "
            "the window needs"
        )
    references: dict[tuple[int, int], tuple[Any, Grads]] = {}
    backwards = [b for b, _ in spy.backward_values]
    for index, step in sorted(steps.items(), key=lambda kv: kv[1].batch):  # earliest first
        # The window runs from the last zero_grad of this optimizer before its step (another
        # optimizer's turn may come before it), from the weights at that micro-batch.
        zeros = watch.zeros_before(step)
        start = watch.window_start(zeros[-1]) if zeros else 0
        m, begun = step.batch + 1, watch.weights_at(start, state)
        if (start, m) not in references:
            groups = ctx.samples.index_batches()[start:m] if ctx.samples.indexable else None
            try:
                whole = one_batch(ctx, groups, batches[start:m])
            except ConcatError as err:
                return skips(f"the window's micro-batches cannot be joined into one batch ({err})")
            grads = step_grads(ctx, begun, [whole], 1, reference=True)
            if grads.tensors is None:
                return skips(f"the one-batch reference run computed no loss ({grads.error})")
            references[start, m] = whole, grads
        whole, grads = references[start, m]
        items = sum(c[0].items or 0 for c in calls[start:m])
        target: dict[str, torch.Tensor] = grads.tensors  # type: ignore[assignment]
        if calls[start][0].reduction == "sum" and abs(scales[0] * items - 1) < 1e-6:  # type: ignore[operator]
            target = {k: g / items for k, g in target.items()}  # a sum divided by the items: a mean
        who = f" of optimizer {index} (of {watch.optimizers})" if watch.optimizers > 1 else ""
        result = compare(watch.grads[index], target)
        evidence["first_window" + who] = result
        if result["relative_difference"] <= RTOL:
            continue
        if moves_with_seed(ctx, begun, whole, grads, reference=True):
            return skips(RANDOM)
        discarded = sorted({backwards[i] for i in range(zeros[-1].backwards)}) if zeros else []
        span, ratio = m - start, result["norm_ratio"]
        verdict = fails(
            f"the first manual step{who} (after {span} micro-batch(es)) "
            f"applies {ratio:.3g}x the gradient of one batch of the same items "
            f"(relative difference {result['relative_difference']:.2g}): "
            + _cause(span, ratio, scales[0], discarded, calls)
        )
        if n > 1:
            return verdict
        return warns(
            "the task steps every micro-batch (no windows combined), so its steps are unaffected "
            f"now, but {verdict.message}; this breaks once it accumulates"
        )
    which = f"each of the {len(steps)} optimizers" if len(steps) > 1 else "the optimizer"
    return passes(
        f"the first manual step of {which} (after {n} micro-batch(es)) applies the gradient "
        "of the loss over all of their items in one batch"
    )


def _cause(
    n: int, ratio: float, scale: float | None, discarded: list[int], calls: list[list[Any]]
) -> str:
    """Why a first manual step over `n` micro-batches is `ratio` x one batch's gradient."""
    if discarded:
        return (
            f"zero_grad() runs inside the window and discards the gradients of micro-batch(es) "
            f"{discarded}: call it once per window, right after optimizer.step()"
        )
    if calls[0][0].reduction == "sum" and n > 1 and abs(ratio * n - 1) < 0.05:
        return (
            "the loss is a sum over samples (reduction='sum'), so one batch's loss is already "
            f"the sum of its micro-batches': do not divide it by {n} (or use reduction='mean' "
            "and divide)"
        )
    if n > 1 and abs(ratio - n) < 0.05 * n:
        return (
            f"the {n} micro-batch means are summed, not averaged: divide each micro-batch loss "
            f"by {n} (by its share of the window's items when micro-batches differ in size)"
        )
    if n < len(calls):
        return (
            f"it steps every {n} micro-batch(es) while another optimizer's window is {len(calls)}, "
            f"with each loss scaled by {scale:.3g}: step every optimizer once per window"
        )
    items = [c[0].items for c in calls]
    if n > 1 and scale is not None and abs(scale * n - 1) < 1e-6 and len(set(items[:n])) > 1:
        return (
            f"each micro-batch loss is divided by {n}, but the micro-batches hold different "
            f"numbers of items ({items}): weight each one by its items / the window's items"
        )
    return f"each micro-batch loss is scaled by {scale:.3g} before backward"
