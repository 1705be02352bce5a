"""metrics.recomputation: a logged validation accuracy is what the validation step's outputs give.

A fresh task trains a few steps on real train batches and validates twice on the first real
validation batches within the same fit, as a run does at its epoch ends. Every accuracy the second
validation logs (a name with `acc`, not a running best or a top-k) must equal the accuracy of the
class scores the validation step hands its loss over those batches: micro (every sample or
position counts once) or macro (each class's recall, averaged), as a fraction or a percentage. A
metric object shared with training (its updates counted in validation) or never reset (earlier
passes counted), or a list of outputs both steps append to, logs something else.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

import lightning as L
import torch

from trainwell.doctor.harness.batches import replay_loader
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.outputs import _call_ids
from trainwell.doctor.harness.samples import iterate_batches, split_loaders
from trainwell.doctor.harness.spy import Spy
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips

TRAIN_STEPS, VAL_BATCHES = 4, 8
TOLERANCE = 1e-4  # a float32 metric against the same counts in float64
NOT_ACCURACY = ("best", "top", "std")


class _Watch(L.Callback):
    """The loss calls each validation batch makes, and the batch; where the last pass began."""

    def __init__(self) -> None:
        self.spy = Spy(max_calls=8 * VAL_BATCHES)
        self.batches: list[Any] = []
        self.last = 0

    def on_validation_start(self, *args: Any) -> None:
        self.last = len(self.batches)

    def on_validation_batch_start(self, trainer: Any, module: Any, batch: Any, *args: Any) -> None:
        self.spy.watch(len(self.batches))
        self.batches.append(batch)

    def on_validation_batch_end(self, *args: Any) -> None:
        self.spy.leave()

    on_exception = on_validation_batch_end


def _accuracies(watch: _Watch) -> list[float] | None:
    """Micro and macro accuracy of the validation step's own class scores, as fractions and as
    percentages; None where a batch hands its loss no class scores against class ids."""
    read = [
        next((r for c in watch.spy.calls_in(i) if (r := _call_ids(c, batch)) is not None), None)
        for i, batch in enumerate(watch.batches[watch.last :], start=watch.last)
    ]
    if any(r is None for r in read):
        return None
    predicted, true = torch.cat([r[0] for r in read]), torch.cat([r[1] for r in read])
    right = (predicted == true).double()
    micro = float(right.mean())
    macro = float(torch.stack([right[true == c].mean() for c in true.unique()]).mean())
    return [micro, macro, 100 * micro, 100 * macro]


def metrics_recomputation(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    if not ctx.has_hook("validation_step"):
        return skips("the task defines no validation_step: no validation metric to recompute")
    loaders = split_loaders(ctx.datamodule, "val")[0]
    val = list(islice(iterate_batches(loaders[0]), VAL_BATCHES)) if loaders else []
    train = ctx.samples.micro_batches(0, TRAIN_STEPS)
    if not val or not train:
        return skips("no validation or train batches to run")
    watch = _Watch()
    fit = ctx.fit(
        ctx.make_task(), replay_loader(train), [watch], TRAIN_STEPS,
        val=replay_loader(val), val_every=max(1, len(train) // 2),
    )  # fmt: skip
    watch.spy.leave()
    if fit.error is not None:
        return skips(f"the short fit with validation failed: {fit.error_line}")
    logged = {
        name: float(value)
        for name, value in fit.trainer.callback_metrics.items()
        if "val" in name.lower()
        and "acc" in name.lower()
        and not any(word in name.lower() for word in NOT_ACCURACY)
        and value.numel() == 1
    }
    if not logged:
        return skips("validation logs no accuracy (a name with `acc`) to recompute")
    recomputed = _accuracies(watch)
    if recomputed is None:
        return skips(
            "the validation step hands its loss no class scores against class ids on every "
            "batch, so its accuracy cannot be recomputed from its outputs"
        )
    evidence |= {"logged": logged, "recomputed_micro_macro": recomputed[:2]}
    evidence["batches"] = batches = len(watch.batches) - watch.last
    for name, value in logged.items():
        if min(abs(value - r) for r in recomputed) > TOLERANCE:
            return fails(
                f"validation logs `{name}` = {value:.4g} but the scores its own validation_step "
                f"hands the loss give {recomputed[0]:.4g} over the same {batches} batches: what is "
                "logged is not this pass's accuracy (a metric object shared with training or never "
                "reset, a list of outputs both steps append to); give each stage its own metric "
                "object and reset it after compute(), or log the object and let Lightning"
            )
    return passes(
        f"{', '.join(f'`{n}`' for n in logged)} equal the accuracy recomputed from the "
        f"validation step's own outputs over {batches} batches"
    )
