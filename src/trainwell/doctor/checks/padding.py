"""loss.padding: inputs that must not matter do not matter.

The probe batch's padding is read from the batch itself (harness.batches.padding_positions): a
mask tensor, lengths, or a pad id filling the ends of a tensor's rows. Every integer tensor of
the padding's shape other than the one that marks it (token ids, per-position labels) gets its
padding positions rewritten with a value it holds at a real position (negative labels, an
`ignore_index`, are left alone); where a pad id marks the padding, the batch is also padded
further, by more pad ids. The task's training_step loss, computed in eval mode, must not move: a
model that pools or attends over padding, or a loss that counts padded labels, makes it move.
"""

from __future__ import annotations

from typing import Any

import torch

from trainwell.doctor.harness.batches import Padding, clone, leaves, padding_positions, restructure
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.losses import ALONE, eval_loss
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips

HOOK = "put the padding mask in the batch as a `mask` / `attention_mask` tensor"
EXTRA = 4  # positions of padding added to every row where a pad id marks the padding


def _rewrite(batch: Any, padding: Padding) -> tuple[Any, list[str]]:
    """A copy of the batch with padding positions of every integer tensor of the padding's shape
    but the marker set to a value from a real position (negative values left as they are)."""
    copy, changed, pad = clone(batch), [], padding.pad
    for path, t in leaves(copy):
        if (
            path == padding.marker
            or t.shape != pad.shape
            or t.is_floating_point()
            or t.dtype == torch.bool
        ):
            continue
        real = t[~pad]
        where = pad & (t >= 0) & (t != real[0])
        if bool(where.any()):
            t[where] = real[0]
            changed.append(path)
    return copy, changed


def _padded_further(batch: Any, pad: torch.Tensor) -> Any | None:
    """The batch with EXTRA more padding positions per row: every tensor of the padding's shape
    grows by the one value it holds at padding (None when one holds several there)."""

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
    """training_step's loss on `batch` in eval mode, or the error it raised."""
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
    edits = []  # (what was done, the edited batch, whether the model may refuse it)
    if changed:
        edits.append(
            (f"rewriting the {count} padding positions of {', '.join(changed)}", rewritten, False)
        )
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
    after = {edit: (_loss(task, edited), optional) for edit, edited, optional in edits}
    evidence |= {"loss": before, "loss_after_each_edit": {e: v for e, (v, _) in after.items()}}
    refused = [(e, v) for e, (v, optional) in after.items() if isinstance(v, str)]
    measured = {e: v for e, (v, _) in after.items() if not isinstance(v, str)}
    if not measured or any(not after[e][1] for e, _ in refused):
        edit, error = min(refused, key=lambda r: after[r[0]][1])  # a required edit first
        return skips(
            f"training_step raised {error} after {edit}, so the padding could not be tested; {HOOK}"
        )
    for edit, value in measured.items():
        if abs(value - before) > 1e-5 * max(1.0, abs(before)):
            return fails(
                f"{edit} (padding told by {padding.where}) moves the loss from {before:.6g} to "
                f"{value:.6g}: the model pools or attends over padding, or the loss counts "
                "padded labels; mask them (a masked mean, key_padding_mask, ignore_index)"
            )
    return passes(f"the loss ignores the {count} padding positions told by {padding.where}")
