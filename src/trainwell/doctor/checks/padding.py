"""loss.padding: inputs that must not matter do not matter.

The probe batch's padding is read from the batch itself: a tensor whose key names a mask
(`mask`, `attention_mask`: true or 1 at real positions; `padding_mask`, `pad_mask`: true at
padding). Every other integer tensor of the mask's shape (token ids, per-position labels) gets
its padding positions rewritten with a value it holds at a real position (negative labels, an
`ignore_index`, are left alone), and the task's training_step loss, computed in eval mode, must
not move: a model that pools or attends over padding, or a loss that counts padded labels,
makes it move.
"""

from __future__ import annotations

from typing import Any

import torch

from trainwell.doctor.checks.finite_difference import ALONE, training_loss
from trainwell.doctor.harness.batches import clone, leaves, padding_positions
from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.doctor.report.verdict import Check

ID = "loss.padding"
HOOK = "put the padding mask in the batch as a `mask` / `attention_mask` tensor"


def _rewrite(batch: Any, mask_path: str, pad: torch.Tensor) -> tuple[Any, list[str]]:
    """A copy of the batch with padding positions of every integer tensor of the mask's shape
    set to a value from a real position (negative values left as they are)."""
    copy, changed = clone(batch), []
    for path, t in leaves(copy):
        if (
            path == mask_path
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


def loss_padding(ctx: DoctorContext) -> Check:
    found = padding_positions(ctx.batch)
    if found is None:
        return Check(ID, "skip", f"the probe batch has no padding mask; {HOOK} to test padding")
    mask_path, pad = found
    edited, changed = _rewrite(ctx.batch, mask_path, pad)
    evidence: dict[str, Any] = {
        "mask": mask_path,
        "padding_positions": int(pad.sum()),
        "tensors_rewritten": changed,
    }
    if not changed:
        return Check(
            ID,
            "skip",
            "no token or label tensor has the mask's shape; keep token ids or labels in the "
            "batch at the mask's shape to test padding",
            evidence,
        )
    task = ctx.make_task().eval()
    try:
        with torch.no_grad(), quiet():
            before, after = (
                float(training_loss(task, ctx.batch)),
                float(training_loss(task, edited)),
            )
    except Exception as err:  # a step that needs the trainer
        return Check(
            ID,
            "skip",
            f"training_step cannot run outside the trainer ({type(err).__name__}); {ALONE} "
            "to test padding",
            evidence,
        )
    evidence |= {"loss": before, "loss_with_padding_rewritten": after}
    if abs(after - before) > 1e-5 * max(1.0, abs(before)):
        return Check(
            ID,
            "fail",
            f"rewriting the {int(pad.sum())} padding positions ({mask_path} marks them) of "
            f"{', '.join(changed)} moves the loss from {before:.6g} to {after:.6g}: the model "
            "pools or attends over padding, or the loss counts padded labels; mask them "
            "(a masked mean, key_padding_mask, ignore_index)",
            evidence,
        )
    return Check(
        ID,
        "pass",
        f"the loss ignores the {int(pad.sum())} padding positions marked by {mask_path}",
        evidence,
    )
