"""params.registered, optimizer.coverage, precision.master_weights and device.placement: can the
optimizer see and update what should train, in a precision and on a device that keep it?

precision.master_weights: in half-precision weights an update below the weight's resolution (2^-11
of it in float16, 2^-8 in bfloat16) is rounded away, and in float16 Adam's eps=1e-8 and small
squared gradients flush to 0. Mixed precision keeps float32 weights; `*-true` precisions are an
explicit choice of half weights and are not flagged.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.observe import observation
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns


def _hidden(value: object) -> list[torch.Tensor]:
    """Parameters reachable through a plain list/tuple/dict (nn.Module does not register these)."""
    found: list[torch.Tensor] = []
    for item in value.values() if isinstance(value, dict) else value:  # type: ignore[union-attr]
        if isinstance(item, nn.Module):
            found.extend(item.parameters())
        elif isinstance(item, nn.Parameter) or (
            isinstance(item, torch.Tensor) and item.requires_grad and item.is_leaf
        ):
            found.append(item)
        elif isinstance(item, list | tuple | dict):
            found.extend(_hidden(item))
    return found


def params_registered(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    task = ctx.make_task()
    registered = {id(p) for p in task.parameters()}
    hidden: dict[str, int] = {}
    kinds: dict[str, str] = {}
    for mod_name, module in task.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_") or not isinstance(value, list | tuple | dict):
                continue
            if missing := [p for p in _hidden(value) if id(p) not in registered]:
                name = f"{mod_name}.{attr}" if mod_name else attr
                hidden[name] = sum(p.numel() for p in missing)
                kinds[name] = type(value).__name__
    trainable = sum(p.numel() for p in task.parameters() if p.requires_grad)
    evidence |= {"trainable_parameters": trainable, "hidden_parameters": hidden}
    if hidden:
        name, count = next(iter(hidden.items()))
        fix = "nn.ModuleDict" if kinds[name] == "dict" else "nn.ModuleList"
        return fails(
            f"layer `{name}` is a plain {kinds[name]}: its {count} parameters are invisible to "
            f"the optimizer, .to(device) and the checkpoint; use {fix}"
        )
    if trainable == 0:
        return fails(
            "the model has no trainable parameters, so training cannot change it; register layers "
            "as nn.Module attributes and leave requires_grad on"
        )
    return passes(f"{trainable} trainable parameters, all registered")


def optimizer_coverage(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    obs = observation(ctx)
    rec = obs.recorder
    if not rec.trainable_at_start and obs.fit.error is not None:
        return skips(
            f"training never reached its first batch ({obs.fit.error_line}); fix that first"
        )
    in_opt: list[int] = [i for group in rec.optimizer_params for i in group]
    counted = set(in_opt)
    missing = [n for n, i in rec.trainable_at_start.items() if i not in counted]
    frozen = [n for n, i in rec.frozen_at_start.items() if i in counted]
    duplicates = len(in_opt) - len(counted)
    evidence |= {
        "optimizers": len(rec.optimizer_params),
        "tensors_in_optimizers": len(in_opt),
        "trainable_tensors": len(rec.trainable_at_start),
        "missing": missing[:20],
        "frozen_in_optimizer": frozen[:20],
        "frozen_in_optimizer_count": len(frozen),
        "duplicates": duplicates,
    }
    if not rec.optimizer_params:
        return fails(
            "configure_optimizers returned no optimizer, so no parameter is ever updated; return "
            "one built from the trainable parameters"
        )
    if missing:
        return fails(
            f"{len(missing)} trainable tensor(s) (first: `{missing[0]}`) are not in the optimizer, "
            "so they never train (a layer added after the optimizer was built?); build the "
            "optimizer in configure_optimizers after the model is complete"
        )
    if frozen:
        return fails(
            f"{len(frozen)} frozen tensor(s) (first: `{frozen[0]}`) are still in the optimizer (it "
            "was built before the freeze), so weight decay/momentum can still move them; build "
            "the optimizer after freezing, from parameters with requires_grad=True"
        )
    if duplicates:
        return fails(
            f"{duplicates} tensor(s) appear twice in the optimizer and get stepped twice; list "
            "each parameter once"
        )
    changes = rec.frozen_changes(obs.task)
    evidence["frozen_tensors_watched"] = len(rec.frozen_values)
    evidence["frozen_tensors_changed"] = changes
    if changes:
        params = {n for n, _ in obs.task.named_parameters()}
        moved = [n for n in changes if n in params]
        name = moved[0] if moved else next(iter(changes))
        where = f"`{name}`, by up to {changes[name]:.3g}"
        if moved:
            return fails(
                f"{len(moved)} parameter(s) with requires_grad=False changed while training "
                f"(first: {where}): something updates them in place, or an optimizer applies "
                "momentum or weight decay to a gradient kept as zeros "
                "(zero_grad(set_to_none=False)); leave frozen tensors out of optimizers and "
                "in-place updates"
            )
        return warns(
            f"{len(changes)} buffer(s) of fully frozen modules changed while training (first: "
            f"{where}), so the frozen part still drifts (BatchNorm statistics in train mode); put "
            "frozen blocks in eval mode in on_train_epoch_start, unless they are meant to adapt"
        )
    unfrozen = [
        name or type(module).__name__
        for name, module in obs.task.named_modules()
        if module.__dict__.get("requires_grad") is False
        and any(p.requires_grad for p in module.parameters())
    ]
    if unfrozen:
        evidence["modules_with_a_requires_grad_attribute"] = unfrozen[:20]
        return fails(
            f"`{unfrozen[0]}.requires_grad = False` sets a plain attribute on the module "
            f"(nn.Module has none), so its parameters still train ({len(unfrozen)} module(s)); "
            f"freeze with `{unfrozen[0]}.requires_grad_(False)`, which reaches every parameter"
        )
    return passes(f"the optimizer holds exactly the {len(counted)} trainable tensors")


def precision_master_weights(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    precision = str(ctx.probe_cfg.trainer.get("precision", "32-true"))
    params = [(n, p) for n, p in ctx.reference_task.named_parameters() if p.requires_grad]
    half: dict[str, list[str]] = {}
    for name, p in params:
        if p.dtype in (torch.float16, torch.bfloat16):
            half.setdefault(str(p.dtype).removeprefix("torch."), []).append(name)
    evidence |= {"trainer_precision": precision, "trainable_tensors": len(params)}
    evidence["half_tensors"] = {k: len(v) for k, v in half.items()}
    if not half:
        return passes(
            f"all {len(params)} trainable tensors are float32 (trainer.precision={precision} "
            "casts per op where it is mixed)"
        )
    if precision.endswith("-true") and not precision.startswith(("32", "64")):
        return passes(
            f"trainable tensors are half precision by the configured trainer.precision={precision} "
            "(no float32 master copy, chosen explicitly)"
        )
    dtype, names = next(iter(half.items()))
    count = sum(len(v) for v in half.values())
    evidence["first_half_tensors"] = names[:5]
    fp16 = "float16" in half
    return Verdict(
        "fail" if fp16 else "warn",
        f"{count} of {len(params)} trainable tensors (first: `{names[0]}`) are stored in {dtype} "
        f"and updated in place with no float32 master copy (trainer.precision={precision}): "
        "updates below the weights' resolution are lost"
        + (" and Adam's eps=1e-8 rounds to 0 in float16 (NaN steps)" if fp16 else "")
        + "; keep the weights float32 (drop .half()/.to(dtype)) and set "
        "trainer.precision=16-mixed or bf16-mixed",
    )


class _DeviceWatch(TorchFunctionMode):
    """Counts torch calls that mix CPU tensors with CUDA tensors (created on the wrong device)."""

    def __init__(self) -> None:
        super().__init__()
        self.mixed: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        devices = {t.device.type for t in tensors if t.dim() > 0}
        if len(devices) > 1:
            self.mixed[getattr(func, "__name__", str(func))] += 1
        return func(*args, **kwargs)


def device_placement(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    if not torch.cuda.is_available():
        return skips(
            "no CUDA device on this machine: CPU-only runs cannot mix devices (rerun the doctor "
            "on a GPU machine)"
        )
    trainer_cfg = ctx.probe_cfg.trainer
    previous = trainer_cfg.accelerator
    trainer_cfg.accelerator = "gpu"
    try:
        with _DeviceWatch() as watch:
            fit = ctx.fit(ctx.make_task(), ctx.fixed_loader(repeats=2), [], max_steps=2)
    finally:
        trainer_cfg.accelerator = previous
    evidence |= {"mixed_device_calls": watch.mixed, "device": torch.cuda.get_device_name()}
    if fit.error is not None or watch.mixed:
        where = fit.error_line or ", ".join(f"{k} x{v}" for k, v in watch.mixed.items())
        return fails(
            f"a training step mixes CPU and CUDA tensors ({where}): something is created on the "
            "CPU in forward/loss; create tensors with device=x.device or register them as buffers"
        )
    return passes("two GPU training steps keep every tensor on CUDA")
