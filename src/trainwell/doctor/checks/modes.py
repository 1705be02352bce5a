"""Mode checks: training really runs in train mode, evaluation really runs in eval mode."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import nn

from trainwell.doctor.harness.context import DoctorContext, fixed_loader, quiet
from trainwell.doctor.harness.observe import crashed_message, observation
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
    if rec.eval_modules:
        batch, names = rec.eval_modules[0]
        after_val = batch >= obs.val_every and not any(
            b < obs.val_every for b, _ in rec.eval_modules
        )
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


class _EvalWatch(L.Callback):
    """During validation: which modules run in train mode, and what the task's children output."""

    def __init__(self) -> None:
        self.training_modules: set[str] = set()
        self.outputs: list[torch.Tensor] = []
        self._handles: list[Any] = []

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        top = {id(m) for _, m in pl_module.named_children() if any(True for _ in m.parameters())}
        for name, module in pl_module.named_modules():
            self._handles.append(module.register_forward_hook(self._hook(name, id(module) in top)))

    def _hook(self, name: str, keep: bool) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if module.training:
                self.training_modules.add(name or "task")
            if keep and isinstance(output, torch.Tensor):
                self.outputs.append(output.detach().clone())

        return hook

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def eval_determinism(ctx: DoctorContext) -> Check:
    obs = observation(ctx)
    task = obs.task
    x, y = ctx.batch
    passes = []
    for _ in range(2):
        watch = _EvalWatch()
        trainer = ctx.trainer(callbacks=[watch], limit_val_batches=1.0)
        try:
            with quiet():
                trainer.validate(
                    task, dataloaders=fixed_loader(x, y, len(x)), verbose=False, weights_only=True
                )
        except Exception as err:  # the user's validation code failed: that is the finding
            return Check(
                "eval.determinism",
                "fail",
                f"validation raised {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}; "
                "fix validation_step",
            )
        passes.append(watch)
    a, b = passes
    diffs = [
        float((p - q).abs().max())
        for p, q in zip(a.outputs, b.outputs, strict=False)
        if p.shape == q.shape
    ]
    max_diff = max(diffs) if diffs else 0.0
    in_train = sorted(a.training_modules | b.training_modules)
    evidence = {
        "outputs_compared": len(diffs),
        "max_abs_difference": max_diff,
        "modules_in_train_mode_during_validation": in_train[:20],
    }
    if max_diff > 1e-6 or in_train:
        cause = (
            f"{len(in_train)} module(s) (first: `{in_train[0]}`) run in train mode during validation"
            if in_train
            else "hidden randomness in the forward"
        )
        return Check(
            "eval.determinism",
            "fail",
            f"two validation passes over the same batch differ by {max_diff:.3g}: {cause} (dropout "
            "active, BatchNorm on batch statistics); do not call self.train() in validation code "
            "and keep randomness out of eval forward",
            evidence,
        )
    if not diffs:
        return Check(
            "eval.determinism",
            "skip",
            "no module output was captured during validation (no validation_step?)",
            evidence,
        )
    return Check(
        "eval.determinism",
        "pass",
        "two validation passes give identical outputs, with every module in eval mode",
        evidence,
    )
