"""accumulation.equivalence: an optimizer step over a window of micro-batches == one batch.

Dropout (p=0) and BatchNorm (eval) are frozen: they make micro-batch and full-batch forwards
differ by design (BatchNorm warns).
"""

from __future__ import annotations

from typing import Any

import torch

from trainwell.blocks.layers import BATCH_NORMS
from trainwell.callbacks.accumulation import count_items, counting_unit
from trainwell.doctor.harness.batches import size_of
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.windows import (
    RANDOM,
    RTOL,
    Window,
    compare,
    counts_in_order,
    moves_with_seed,
    step_grads,
    windows,
)
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns


def accumulation_equivalence(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    probe = ctx.make_task()
    configured = ctx.accumulate
    k = configured if configured > 1 else 2
    state = {n: t.clone() for n, t in probe.state_dict().items()}
    evidence |= {"accumulate_configured": configured, "accumulate_probed": k}
    evidence["item_unit"] = counting_unit(probe)
    found, why = windows(ctx, k, configured)
    if not found:
        return skips(f"no window to compare: {why}")
    evidence["configured_world_size"] = ctx.world_size
    checked = (_compare_window(ctx, state, window, k, evidence) for window in found)
    if (verdict := next((v for v in checked if v is not None), None)) is not None:
        if verdict.status != "fail" or configured != 1 or ctx.world_size != 1:
            return verdict
        # A window unlike one batch matters only once windows (or ranks) are combined: at K=1 on
        # one process every step is one micro-batch, and a scaled loss only changes what LR means.
        return warns(
            f"this run does not accumulate (K=1, one process), so its steps are unaffected, but "
            f"probed with K={k}: {verdict.message}; this would break gradients once "
            "accumulate_grad_batches > 1 or DDP (which averages ranks' gradients) is turned on"
        )
    norms = [n for n, m in probe.named_modules() if isinstance(m, BATCH_NORMS)]
    evidence["batchnorm_layers"] = norms
    if norms and configured > 1:
        plan = ctx.plan
        evidence |= {"micro_batch": plan.micro_batch, "effective_batch": plan.effective_batch}
        return warns(
            f"gradients match one batch of the same samples with BatchNorm frozen, but "
            f"{len(norms)} BatchNorm layer(s) (first `{norms[0]}`) normalise each micro-batch of "
            f"{plan.micro_batch} by its own statistics, not the effective batch of "
            f"{plan.effective_batch}, so accumulation is not exact in training mode; use GroupNorm "
            "or LayerNorm (model.net.norm=group for the template's nets), or a larger micro-batch "
            "with less accumulation"
        )
    where = "" if configured > 1 else f" (probed with K={k}; this run does not accumulate)"
    labels, s = " and ".join(w.label for w in found), "s" if len(found) == 1 else ""
    return passes(f"{labels} give{s} the gradient of one batch of the same items{where}")


def _compare_window(
    ctx: DoctorContext,
    state: dict[str, torch.Tensor],
    window: Window,
    k: int,
    evidence: dict[str, Any],
) -> Verdict | None:
    """A verdict when `window` cannot be compared or differs from one batch; None: it matches."""
    windowed = step_grads(ctx, state, window.batches, k, watch=True)
    if windowed.skipped:
        return skips(
            f"training_step returned None (skipped) for micro-batch(es) {windowed.skipped} "
            f"of {window.label}, so that window holds fewer items than one batch of them; "
            "nothing to compare"
        )
    whole = step_grads(ctx, state, [window.whole], 1)
    if windowed.tensors is None or whole.tensors is None:
        return skips(f"a probe fit failed: {windowed.error or whole.error}")
    if moves_with_seed(ctx, state, window.whole, whole, reference=False):
        return skips(RANDOM)
    result = compare(windowed.tensors, whole.tensors)
    sizes = [size_of(b) for b in window.batches]
    evidence[window.label] = {"micro_batch_sizes": sizes, **result}
    if result["relative_difference"] <= RTOL:
        return None
    calls = [windowed.spy.calls_in(i) for i in range(len(window.batches))] if windowed.spy else []
    seen = [c[0].items for c in calls if len(c) == 1 and c[0].reduction == "mean"]
    if len(seen) == len(window.batches) and None not in seen:
        counts = [int(c) for c in seen]  # type: ignore[arg-type]
        task = ctx.make_task()
        declared = counting_unit(task) != "samples"
        stated = [int(count_items(task, b)) for b in window.batches] if declared else sizes
        evidence |= {"items_the_loss_averages": counts, "items_counted": stated}
        # Weighed by other counts than the loss averages over: a fail where its own counts match.
        if counts != stated and len({c / s for c, s in zip(counts, stated, strict=True) if s}) > 1:
            fixed = step_grads(ctx, state, window.batches, k, loss_items=counts_in_order(counts))
            exact = fixed.tensors is not None and (
                compare(fixed.tensors, whole.tensors)["relative_difference"] <= RTOL
            )
            evidence["matches_when_counted_by_the_loss"] = exact
            if exact and not declared:
                return fails(
                    f"{window.label} weighs each micro-batch by its samples ({sizes}), but the "
                    f"loss is a mean over {counts} items (tokens, unmasked targets) in them: the "
                    f"step differs from one batch by {result['relative_difference']:.2g} "
                    f"(relative); declare `def loss_items(self, batch)` in {type(task).__name__} "
                    "returning the number of targets its loss averages over, e.g. "
                    "(batch['targets'] != -100).sum(); with it this window matches"
                )
            if exact:
                return fails(
                    f"{type(task).__name__}.loss_items returns {stated} for {window.label}, but "
                    f"the loss averages over {counts} items: make loss_items count exactly what "
                    "training_step's loss averages over; with those counts this window matches"
                )
    return fails(
        f"{window.label} gives {result['norm_ratio']:.3g}x the gradient of the same samples in "
        f"one batch (relative difference {result['relative_difference']:.2g}): "
        + _scaling_cause(calls, result["norm_ratio"], len(window.batches), evidence)
    )


def _scaling_cause(calls: list[list[Any]], ratio: float, n: int, evidence: dict[str, Any]) -> str:
    """The likely cause of a window whose gradient is a multiple of one batch's."""
    reductions = sorted({c.reduction for batch in calls for c in batch})
    evidence["loss_reductions_seen"] = reductions
    # A sum over samples grows with the batch: one batch of n micro-batches sums n x more
    # terms than each micro-batch, so the normalised window is 1/n of it.
    if "sum" in reductions or (n > 1 and abs(ratio * n - 1) < 0.05):
        how = "reduction='sum'" if "sum" in reductions else f"the window gives 1/{n} of it"
        return (
            f"the loss is summed over samples instead of averaged ({how}), so it grows with "
            "the batch and accumulation (which averages micro-batches) cannot match one "
            "batch; return a mean (reduction='mean', .mean()) from training_step"
        )
    multiplied = n > 1 and abs(ratio - n) < 0.05 * n
    if not multiplied and any(c.weighted and c.reduction == "mean" for b in calls for c in b):
        return (
            "the loss weighs classes under a mean reduction (CrossEntropyLoss(weight=...)), "
            "which divides each micro-batch by its own sum of class weights, so no window is "
            "one batch's weighted mean; take reduction='none', multiply by weight[y] and "
            "take .mean(): a mean over samples accumulates exactly"
        )
    if not multiplied and abs(ratio - 1) < 0.02:
        return (
            "the window's gradient has one batch's size but not its direction, so a micro-batch's "
            "loss is not a plain mean over its samples: a mean over tokens or unmasked targets "
            "(declare `def loss_items(self, batch)` returning their count), or outputs that depend "
            "on the rest of the micro-batch (padding to its longest sequence, batch statistics)"
        )
    how = f"multiplied by the micro-batch count ({n})" if multiplied else "scaled per micro-batch"
    return (
        f"the loss is {how} somewhere (Lightning and the template already "
        "normalise each window); return the plain micro-batch mean from training_step, never "
        "multiplied or divided by accumulate_grad_batches"
    )
