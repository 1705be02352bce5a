"""What the task computes in evaluation: outputs of the task and its children on the probe batch.

A validation pass over the fixed probe batch, with forward hooks on the task itself and on each
top-level child that holds parameters: whatever the user's validation_step calls (`self(x)`,
`self.net(...)`, `self.encoder(...)`), those outputs are captured, as are the modules that run
in train mode while validating.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import nn

from trainwell.doctor.harness.batches import leaves
from trainwell.doctor.harness.context import DoctorContext, quiet
from trainwell.errors import error_line


class OutputWatch(L.Callback):
    def __init__(self) -> None:
        self.training_modules: set[str] = set()
        self.outputs: list[torch.Tensor] = []
        self.metrics: dict[str, float] = {}  # every value the pass logged
        self._handles: list[Any] = []

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        watched = {id(pl_module)} | {
            id(m) for _, m in pl_module.named_children() if any(True for _ in m.parameters())
        }
        for name, module in pl_module.named_modules():
            self._handles.append(
                module.register_forward_hook(self._hook(name, id(module) in watched))
            )

    def _hook(self, name: str, keep: bool) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if module.training:
                self.training_modules.add(name or "task")
            if keep:
                self.outputs.extend(t.detach().clone() for _, t in leaves(output))

        return hook

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    on_test_start = on_validation_start
    on_test_end = on_validation_end


def evaluation_outputs(
    ctx: DoctorContext,
    task: L.LightningModule,
    borrow_training_step: bool = False,
    loader: Any = None,
    stage: str = "validate",
) -> tuple[OutputWatch | None, str]:
    """Validate (or `stage="test"`: test) `task` on the probe batch (or on `loader`); (the
    watch, '') or (None, why it could not run).

    `borrow_training_step`: a task without validation_step is evaluated through its
    training_step (under no_grad, in eval mode, nothing stepped) instead.
    """
    borrowed = False
    if stage == "validate" and not ctx.has_hook("validation_step"):
        if not borrow_training_step:
            return None, "the task has no validation_step"
        task.validation_step = task.training_step  # type: ignore[method-assign]
        borrowed = True
    watch = OutputWatch()
    trainer = ctx.trainer(callbacks=[watch], limit_val_batches=1.0)
    # Lightning puts back each module's train/eval mode only when the pass ends normally: a step
    # that raises leaves the task in eval mode, with the watch's hooks on it, and every check
    # after this one would then train an eval-mode task (BatchNorm on running statistics).
    modes = [(m, m.training) for m in task.modules()]
    try:
        with quiet():
            results = getattr(trainer, stage)(
                task,
                dataloaders=ctx.fixed_loader() if loader is None else loader,
                verbose=False,
                weights_only=True,
            )
        watch.metrics = {k: float(v) for r in results for k, v in r.items()}
    except Exception as err:  # the user's evaluation code failed: the caller reports it
        via = (
            "training_step run as an evaluation step"
            if borrowed
            else {"validate": "validation"}.get(stage, stage)
        )
        return None, f"{via} raised {error_line(err)}"
    finally:
        if borrowed:
            del task.validation_step
        watch.on_validation_end(trainer, task)
        for module, training in modes:
            module.training = training
    return watch, ""


def output_differences(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[float]:
    """Max |a - b| per pair of same-shaped, non-empty outputs (any dtype, bool included)."""
    return [
        float((p.double() - q.double()).abs().max())
        for p, q in zip(a, b, strict=False)
        if p.shape == q.shape and p.numel()
    ]
