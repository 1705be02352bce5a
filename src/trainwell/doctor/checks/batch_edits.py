"""loss.padding and eval.batch_independence: what shares a sample's batch (padding, other samples,
their order) must not move its loss or its eval outputs."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from trainwell.doctor.harness.batches import (
    Padding,
    clone,
    integral,
    leaves,
    padding_positions,
    replay_loader,
    restructure,
    rows,
    size_of,
)
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import ALONE, eval_loss, observation
from trainwell.doctor.harness.outputs import evaluation_outputs, output_differences
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns

HOOK = "put the padding mask in the batch as a `mask` / `attention_mask` tensor"
EXTRA = 4  # positions of padding added to every row where a pad id marks the padding


def _rewrite(batch: Any, padding: Padding) -> tuple[Any, list[str]]:
    """A copy of the batch with the padding of its token and label tensors set to a real value."""
    copy, changed, pad = clone(batch), [], padding.pad
    for path, t in leaves(copy):
        if path == padding.marker or t.shape != pad.shape or not integral(t):
            continue
        real = t[~pad]
        where = pad & (t >= 0) & (t != real[0])
        if bool(where.any()):
            t[where] = real[0]
            changed.append(path)
    return copy, changed


def _padded_further(batch: Any, pad: torch.Tensor) -> Any | None:
    """The batch with EXTRA more padding positions per row (None: several values at padding)."""

    def grow(t: torch.Tensor) -> torch.Tensor:
        if t.shape != pad.shape:
            return t
        fill = t[pad]
        if not bool((fill == fill[0]).all()):
            raise ValueError("several values at padding")
        return torch.cat([t, fill[0].expand(t.shape[0], EXTRA)], dim=1)

    try:
        return restructure(batch, grow)
    except ValueError:
        return None


def _loss(task: Any, batch: Any) -> float | str:
    try:
        return eval_loss(task, batch)
    except Exception as err:  # reported by the caller as what could not be measured
        return type(err).__name__


def loss_padding(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    padding = padding_positions(ctx.batch)
    if padding is None:
        return skips(f"the probe batch has no padding mask; {HOOK} to test padding")
    count = int(padding.pad.sum())
    rewritten, changed = _rewrite(ctx.batch, padding)
    # (what was done, the edited batch, whether the model may refuse it)
    what = f"rewriting the {count} padding positions of {', '.join(changed)}"
    edits = [(what, rewritten, False)] if changed else []
    further = _padded_further(ctx.batch, padding.pad) if padding.pad_id is not None else None
    if further is not None:
        # A model that takes rows of one length only refuses longer rows: not measured then.
        edits.append((f"padding every row with {EXTRA} more pad ids", further, True))
    evidence |= {
        "padding_told_by": padding.where,
        "padding_positions": count,
        "tensors_rewritten": changed,
        "padded_further_by": EXTRA if further is not None else 0,
    }
    if not edits:
        return skips(
            "no token or label tensor has the padding's shape; keep token ids or labels in the "
            "batch at the mask's shape to test padding"
        )
    task = ctx.make_task().eval()
    before = _loss(task, ctx.batch)
    if isinstance(before, str):  # a step that needs the trainer
        return skips(
            f"training_step cannot run outside the trainer ({before}); {ALONE} to test padding"
        )
    after = {edit: _loss(task, edited) for edit, edited, _ in edits}
    evidence |= {"loss": before, "loss_after_each_edit": after}
    refused = [(e, after[e], optional) for e, _, optional in edits if isinstance(after[e], str)]
    if refused and (len(refused) == len(edits) or not refused[0][2]):  # the required edit first
        edit, error, _ = refused[0]
        return skips(
            f"training_step raised {error} after {edit}, so the padding could not be tested; {HOOK}"
        )
    for edit, value in after.items():
        if isinstance(value, float) and abs(value - before) > 1e-5 * max(1.0, abs(before)):
            return fails(
                f"{edit} (padding told by {padding.where}) moves the loss from {before:.6g} to "
                f"{value:.6g}: the model pools or attends over padding, or the loss counts "
                "padded labels; mask them (a masked mean, key_padding_mask, ignore_index)"
            )
    return passes(f"the loss ignores the {count} padding positions told by {padding.where}")


# Outputs of one sample computed in batches of different sizes differ by float rounding only
# (another kernel blocking); a layer that normalises over the batch moves them by far more.
BATCH_RTOL = 1e-4
# The same samples' loss reordered or regrouped differs by float32 summation order only.
LOSS_RTOL = 2e-5
FEWEST = 4  # samples in the probe batch: two halves of two, and two different splits


def _regrouper(ctx: DoctorContext) -> tuple[Callable[[list[int]], Any], int, str]:
    """A builder of batches of the probe batch's samples by position, its size, and why it cannot
    be regrouped (''), through the loader's own collate_fn (per-batch padding) where it can."""
    indices, why = ctx.probe_indices, ""
    if indices is not None:
        n = len(indices)

        def make(pos: list[int]) -> Any:
            return ctx.samples.collate([indices[p] for p in pos])
    else:
        n = size_of(ctx.batch) or 0
        loader_size = getattr(ctx.samples.loader, "batch_size", None)
        other = [(p, t.shape[0]) for p, t in leaves(ctx.batch) if t.dim() and t.shape[0] != n]
        if other or loader_size not in (None, n):
            seen = f"`{other[0][0]}` has {other[0][1]}" if other else f"batch_size={loader_size}"
            why = (
                f"the training batch has {n} rows in its first tensor but {seen}, so it cannot "
                "be split into samples; yield one row per sample in every tensor, or give the "
                "train dataset __getitem__ and __len__"
            )
        make = partial(rows, ctx.batch)
    if not why and n < FEWEST:
        why = (
            f"the probe batch has {n} samples, too few to split; set probe.batch_size (and "
            f"the train batch size) to {FEWEST} or more"
        )
    return make, n, why


def _sample_shift(full: list[torch.Tensor], part: list[torch.Tensor], n: int, k: int) -> float:
    """Max change of the first k samples' outputs evaluated without the rest. An output of n * m
    rows (per-token logits as (batch * tokens, vocab)) holds them in its first k * m rows."""
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


def _output_independence(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    if not ctx.has_hook("validation_step"):
        return skips("the task defines no validation_step, so no evaluation to check")
    make, n, why = _regrouper(ctx)
    if why:
        return skips(why)
    k, task = n // 2, observation(ctx).task
    runs = [evaluation_outputs(ctx, task)[0], evaluation_outputs(ctx, task)[0]]
    part, error = evaluation_outputs(ctx, task, loader=replay_loader([make(list(range(k)))]))
    if runs[0] is None or runs[1] is None or part is None:
        return skips(f"validation could not run: {error or 'see eval.determinism'}")
    if max(output_differences(runs[0].outputs, runs[1].outputs), default=0.0) > 0:
        return skips(
            "two validation passes over one batch already differ (eval.determinism reports "
            "it), so the batch's influence cannot be told apart"
        )
    shift = _sample_shift(runs[0].outputs, part.outputs, n, k)
    evidence |= {"batch": n, "half_batch": k, "max_relative_shift": shift}
    if shift < 0:
        return skips(
            "no per-sample output of the evaluation could be compared; return one output row "
            "per sample (batch first) from forward to test it"
        )
    if shift > BATCH_RTOL:
        return warns(
            f"in eval mode the first {k} samples' outputs change by {shift:.3g} (relative) when "
            f"evaluated without the other {n - k}: a layer mixes information across the batch "
            "(a BatchNorm with track_running_stats=False normalises with each batch's own "
            "statistics); keep track_running_stats=True, or use GroupNorm/LayerNorm"
        )
    return passes(f"each sample's eval outputs are the same in a batch of {n} and of {k}")


def _between(whole: float, a: float, b: float) -> bool:
    """Whether `whole` is a weighted mean (weights: samples, tokens, anything positive) of the
    two halves' losses, or their sum: a per-sample loss reduced either way lies there."""
    tol = LOSS_RTOL * (abs(a) + abs(b) + abs(whole) + 1e-12)
    return min(a, b) - tol <= whole <= max(a, b) + tol or abs(whole - (a + b)) <= tol


def _loss_independence(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    make, n, why = _regrouper(ctx)
    if why:
        return skips(why)
    task = ctx.make_task()
    if not task.automatic_optimization:
        return skips(
            "manual optimization: training_step returns no loss to compare; return the loss "
            "(it may also step) to test it"
        )
    task = task.eval()
    order = list(range(n))
    splits = [(order[: n // 2], order[n // 2 :]), (order[::2], order[1::2])]
    try:
        whole = eval_loss(task, make(order))
        again = eval_loss(task, make(order))
        other_seed = eval_loss(task, make(order), seed=1)
        reversed_ = eval_loss(task, make(order[::-1]))
        twice = eval_loss(task, make(order + order))
        halves = [(eval_loss(task, make(a)), eval_loss(task, make(b))) for a, b in splits]
    except Exception as err:  # a step that needs the trainer, or returns no loss
        return skips(f"training_step's loss cannot be computed alone ({err}); {ALONE}")
    evidence |= {
        "loss": whole,
        "loss_samples_reversed": reversed_,
        "loss_each_sample_twice": twice,
        "loss_of_halves": halves,
    }
    if whole != again:
        return skips(
            "training_step's loss changes between two calls on one batch (a random collate_fn, "
            "or state the step keeps); draw random masking in the dataset's __getitem__ and "
            "keep the loss a function of the batch to test it"
        )
    if other_seed != whole:
        # Mixup, noise or random crops in the step: the same seed over another order draws
        # other numbers for each sample, so a moved loss would prove nothing.
        return skips(
            "training_step draws random numbers (mixup, noise, augmentation), so its loss over "
            "another order cannot be compared; move them to the datamodule to test it"
        )
    tol = LOSS_RTOL * (abs(whole) + 1e-12)
    if abs(reversed_ - whole) > tol:
        return fails(
            f"reversing the order of the {n} samples in the batch moves training_step's loss "
            f"from {whole:.6g} to {reversed_:.6g} (eval mode, same seed): the loss reads the "
            "batch order (weights by position, a sort that leaves labels behind, a cumulative "
            "op or softmax over the batch axis)"
        )
    # Every sample twice: a mean (by samples or tokens) stays, a sum doubles.
    doubled = min(abs(twice - whole), abs(twice - 2 * whole)) > tol
    bad = [(a, b) for (a, b) in halves if not _between(whole, a, b)]
    if doubled or bad:
        seen = (
            f"with every sample twice it is {twice:.6g}"
            if doubled
            else f"its halves' losses are {bad[0][0]:.6g} and {bad[0][1]:.6g}"
        )
        return warns(
            f"the batch's training loss is {whole:.6g} and {seen}, which no mean or sum of "
            "per-sample losses gives (eval mode): a sample's loss depends on its batch "
            "companions (inputs or losses normalised by batch statistics); in-batch negatives "
            "of a contrastive loss do this by design"
        )
    return passes(
        "training_step's loss ignores the batch order and is a mean or sum of per-sample "
        "losses (halves and doubled samples agree)"
    )


def eval_batch_independence(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    evidence |= {"outputs": {}, "loss": {}}
    outputs = _output_independence(ctx, evidence["outputs"])
    loss = _loss_independence(ctx, evidence["loss"])
    worst = max((outputs, loss), key=lambda c: ("skip", "pass", "warn", "fail").index(c.status))
    if worst.status in ("pass", "skip") and outputs.status == loss.status:
        return Verdict(worst.status, f"{outputs.message}; {loss.message}")
    return Verdict(worst.status, worst.message)
