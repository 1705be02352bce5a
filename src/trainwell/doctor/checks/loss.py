"""loss.logits, targets.contract and model.head_width: does the loss get what it expects, as the
task calls it, and does the model's output layer have one output per class the data declares?
"""

from __future__ import annotations

from typing import Any

import torch

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import (
    VALUE_LOSSES,
    crashed_message,
    first_loss,
    no_classes,
    observation,
    target_path,
)
from trainwell.doctor.harness.scan import scan
from trainwell.doctor.harness.spy import CLASS_INDEX, LossCall
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns

TOL = 1e-3
ELEMENTWISE = (*VALUE_LOSSES, "binary_cross_entropy", "binary_cross_entropy_with_logits")


def loss_logits(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    call = first_loss(ctx)
    if call is None:
        obs = observation(ctx)
        reason = crashed_message(obs) if obs.fit.error else "no recognised loss function was called"
        return skips(f"{reason} (custom loss: check it by hand)")
    x = call.input.float()
    evidence |= {"loss": call.name, "input_shape": list(x.shape)}
    if call.name in CLASS_INDEX and x.dim() >= 2:
        row_sum_dev = float((x.sum(dim=1) - 1).abs().max())
        lse_dev = float(torch.logsumexp(x, dim=1).abs().max())
        evidence |= {"max_row_sum_deviation": row_sum_dev, "max_logsumexp_deviation": lse_dev}
        probabilities = row_sum_dev < TOL and float(x.min()) >= 0
        log_probabilities = lse_dev < TOL
        if call.name == "cross_entropy" and probabilities:
            return fails(
                "the net applies softmax before CrossEntropyLoss (its outputs are probabilities: "
                f"rows sum to 1 within {row_sum_dev:.1e}), which squashes the gradients; return raw "
                "logits and let the loss apply log_softmax"
            )
        if call.name == "cross_entropy" and log_probabilities:
            return fails(
                "the net applies log_softmax before CrossEntropyLoss, which applies it again (rows' "
                f"logsumexp is 0 within {lse_dev:.1e}): the outputs are not the logits the task "
                "contract promises; return raw logits (or use NLLLoss on log-probabilities)"
            )
        if call.name == "nll_loss" and not log_probabilities:
            what = "probabilities" if probabilities else "raw logits"
            return fails(
                f"NLLLoss receives {what}, not log-probabilities (max logsumexp deviation "
                f"{lse_dev:.2f}); apply log_softmax first or use CrossEntropyLoss on logits"
            )
    elif call.name == "binary_cross_entropy_with_logits":
        inside = bool(((x >= 0) & (x <= 1)).all())
        evidence |= {"all_inputs_in_0_1": inside, "made_by": call.producer}
        # Raw logits of a fresh net can all fall in [0, 1] by chance (a GAN discriminator's
        # near-zero outputs): the op that made them decides when the graph says.
        squashed = call.producer is None or call.producer.startswith("Sigmoid")
        if inside and squashed and x.numel() >= 8:
            return fails(
                "BCEWithLogitsLoss receives values all inside [0, 1] (sigmoid applied before a "
                "logits loss); return raw logits"
            )
    if call.name in VALUE_LOSSES or call.name == "binary_cross_entropy":
        return skips(
            f"{call.name} takes values, not logits: no softmax / sigmoid contract to check"
        )
    return passes(f"{call.name} receives raw logits")


def targets_contract(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    call = first_loss(ctx)
    classes: int | None = None  # a class-index loss scores its input's dim 1 (0 unbatched)
    if call is not None and call.name in CLASS_INDEX and call.input.dim() > 0:
        classes = int(call.input.shape[1 if call.input.dim() >= 2 else 0])
    data = scan(ctx)
    path = target_path(ctx, call) if call is not None else None
    dtype = data.dtypes.get(path, "unknown") if path else "unknown"
    evidence |= {"num_classes": classes, "target_in_batch": path, "label_dtype": dtype}
    if call is None:
        obs = observation(ctx)
        if obs.fit.error is not None:
            return skips(crashed_message(obs))
        return skips(
            "no recognised loss function (cross_entropy, nll_loss, BCE, MSE, L1, Huber) was "
            "called in training_step; check the targets by hand"
        )
    t = call.target
    evidence |= {"loss": call.name, "target_dtype": str(t.dtype), "target_shape": list(t.shape)}
    if (broadcast := _broadcast_fault(call, evidence)) is not None:
        return broadcast
    if call.name == "cross_entropy" and t.is_floating_point() and t.shape == call.input.shape:
        binary = bool(((t == 0) | (t == 1)).all())
        if binary and bool((t.sum(dim=1) == 1).all()):
            return fails(
                "CrossEntropyLoss receives one-hot float targets (read as soft labels, which hides "
                "label bugs and costs memory); pass class indices as int64 (targets.argmax(1))"
            )
    if call.name in VALUE_LOSSES and path is not None and not dtype.startswith("torch.float"):
        integral = bool((t == t.round()).all())
        evidence["target_values_integral"] = integral
        if integral:
            return fails(
                f"{call.name} regresses integer class ids ({int(t.unique().numel())} distinct, "
                f"from {path}), which imposes an order and distances between classes; use "
                "CrossEntropyLoss on per-class logits"
            )
    if not t.is_floating_point() and classes is not None and call.name == "cross_entropy":
        bad, valid = _outside(t, call, classes)
        evidence["out_of_range_in_probe_batch"] = bad
        if bad:
            return _out_of_range(bad, "label(s) in the probe batch", valid, classes)
    labels = data.values(path) if path and classes is not None else None
    if labels is not None:
        # The probe batch alone can miss a rare out-of-range class: the scanned labels too.
        bad, labels = _outside(labels, call, classes)
        evidence |= {
            "label_min": int(labels.min()) if labels.numel() else None,
            "label_max": int(labels.max()) if labels.numel() else None,
            "labels_scanned": int(labels.numel()),
            "out_of_range": bad,
        }
        if bad:
            which = f"of {labels.numel()} scanned labels ({path})"
            return _out_of_range(bad, which, labels, classes)
    scanned = f", {evidence['labels_scanned']} scanned" if "labels_scanned" in evidence else ""
    where = f" ({path}{scanned})" if path else ""
    fit = "of the shape it expects" if classes is None else f"in range for {classes} classes"
    return passes(f"{call.name} gets {evidence['target_dtype']} targets{where} {fit}")


def _outside(labels: torch.Tensor, call: LossCall, classes: int) -> tuple[int, torch.Tensor]:
    """How many of the labels the loss does not ignore fall outside [0, classes), and those."""
    if call.ignore_index is not None:
        labels = labels[labels != call.ignore_index]
    return int(((labels < 0) | (labels >= classes)).sum()), labels


def _out_of_range(bad: int, which: str, labels: torch.Tensor, classes: int) -> Verdict:
    return fails(
        f"{bad} {which} are outside [0, {classes}) (max {int(labels.max())}); fix the labels or "
        "set model.num_classes to cover them"
    )


def _broadcast_fault(call: LossCall, evidence: dict) -> Verdict | None:
    """A fail when an elementwise loss's input and target broadcast beyond either's size: (N, 1)
    against (N,) scores every prediction against every target (torch warns for some losses only)."""
    if call.name not in ELEMENTWISE or call.input.shape == call.target.shape:
        return None
    try:
        shape = torch.broadcast_shapes(call.input.shape, call.target.shape)
    except RuntimeError:  # the loss call itself raised: the run's error says so
        return None
    evidence["broadcast_shape"] = list(shape)
    if shape.numel() <= max(call.input.numel(), call.target.numel()):
        return None  # one side is a true broadcast of the other (a scalar or per-row target)
    return fails(
        f"{call.name} gets input {list(call.input.shape)} and target {list(call.target.shape)}, "
        f"which broadcast to {list(shape)}: every prediction is scored against every target "
        "and the model learns their mean; make the shapes equal (output.squeeze(-1) or "
        "target.unsqueeze(-1))"
    )


def model_head_width(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    if values := no_classes(ctx):
        return skips(f"{values}: no class count to compare the head's width with")
    declared = getattr(ctx.datamodule, "num_classes", None)
    data = type(ctx.datamodule).__name__
    if not isinstance(declared, int) or isinstance(declared, bool) or declared <= 0:
        return skips(
            f"{data} declares no num_classes: no class count to compare with (give it a "
            "num_classes attribute)"
        )
    # The class dimension (batch, classes, ...) of the logits a class-index loss saw in the probe
    # fit is the head's real width; the config's number is the fallback for a loss with none.
    calls = observation(ctx).spy.losses
    widths = [c.input.shape[1] for c in calls if c.name in CLASS_INDEX and c.input.dim() > 1]
    width = int(widths[0]) if widths else None
    configured = ctx.cfg.model.get("num_classes")
    evidence |= {"data_num_classes": declared, "logits_width": width}
    evidence["model_num_classes"] = configured
    head = width if width is not None else configured
    if not isinstance(head, int):
        return skips(
            "no class-index loss seen and no model.num_classes: the head's width is unknown"
        )
    if head == declared:
        return passes(f"the head has one output per class ({declared})")
    return warns(
        f"the model's head has {head} outputs but {data} declares {declared} classes; drop the "
        f"model.num_classes override (it defaults to the datamodule's) or set "
        f"model.num_classes={declared}"
    )
