"""What a module or scheduler holds, read without running anything: modes, frozen state,
gradient norms, a schedule's planned length."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def eval_mode_modules(module: nn.Module) -> list[str]:
    """Names of submodules in eval mode (the root is called 'task')."""
    return [name or "task" for name, m in module.named_modules() if not m.training]


def frozen_modules(module: nn.Module) -> list[str]:
    """Submodules that hold parameters, none of them trainable (a frozen backbone, a frozen BN)."""
    return [
        name
        for name, m in module.named_modules()
        if (own := list(m.parameters())) and not any(p.requires_grad for p in own)
    ]


def frozen_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """What training must leave as it is: parameters with requires_grad=False, and the buffers
    of modules whose own parameters are all frozen (a frozen BatchNorm's running statistics)."""
    state = {n: p for n, p in module.named_parameters() if not p.requires_grad}
    for prefix, m in module.named_modules():
        own = list(m.parameters(recurse=False))
        if own and not any(p.requires_grad for p in own):
            state |= {f"{prefix}.{n}".lstrip("."): b for n, b in m.named_buffers(recurse=False)}
    return state


def grad_norms(module: nn.Module) -> dict[str, float | None]:
    """Per trainable parameter: its gradient's L2 norm, or None when it has no gradient."""
    out: dict[str, float | None] = {}
    for name, p in module.named_parameters():
        if p.requires_grad:
            out[name] = None if p.grad is None else float(p.grad.detach().float().norm())
    return out


def schedule_length(scheduler: Any) -> int | None:
    """The steps a scheduler was sized for, where it says (OneCycleLR's total_steps, a LambdaLR
    whose function keeps a `total_steps`, a cosine's T_max); None for open-ended schedules."""
    for owner in (scheduler, *getattr(scheduler, "lr_lambdas", ())):
        for attribute in ("total_steps", "T_max"):
            value = getattr(owner, attribute, None)
            if isinstance(value, int):
                return value
    return None
