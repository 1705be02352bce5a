"""Config values checked by key before anything runs: a wrong type or an out-of-range value is one
line naming the key, the value and what is expected (exit 2), instead of a TypeError deep inside
Lightning or a constructor, raised after the data has loaded.

Two sources of truth: the template's own knobs (TEMPLATE_KEYS), and for every `_target_` under
`data` and `model` (a user's classes included) the annotations of its `__init__`."""

from __future__ import annotations

import inspect
import os
import types
import typing
from pathlib import Path
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

# key: (type, smallest allowed value, what the value means)
TEMPLATE_KEYS: dict[str, tuple[type, float | None, str]] = {
    "seed": (int, None, "an integer"),
    "data.batch_size": (int, 1, "an integer >= 1 (the micro-batch)"),
    "data.num_workers": (int, 0, "an integer >= 0"),
    "trainer.max_epochs": (int, -1, "an integer >= -1 (-1: no limit)"),
    "trainer.max_steps": (int, -1, "an integer >= -1 (-1: no limit)"),
    "trainer.accumulate_grad_batches": (int, 1, "an integer >= 1"),
    "model.optimizer.lr": (float, 0, "a number >= 0"),
    "ema.decay": (float, 0, "a number in [0, 1] (0.999 is usual) or null (off)"),
    "ema.update_every_n_steps": (int, 1, "an integer >= 1"),
    "ema.update_starting_at_step": (int, 0, "an integer >= 0 (0-based) or null"),
}

# key: the values it may take (keys of one script's config, absent from the others')
TEMPLATE_CHOICES: dict[str, tuple[str | None, ...]] = {
    "ort_spin": ("always", "run", "never"),  # serve.yaml
    "summary.mode": ("min", "max", None),  # train.yaml (null: the monitored metric's mode)
}

_MISSING = object()


def _value(cfg: DictConfig, key: str) -> Any:
    """The resolved value at `key`, or _MISSING (absent, or only resolvable inside a run)."""
    try:
        return OmegaConf.select(cfg, key, default=_MISSING, throw_on_missing=False)
    except Exception:  # an interpolation that needs the running job (${hydra:...}): checked later
        return _MISSING


def _is(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, int | float)
    if kind in (Path, os.PathLike):
        return isinstance(value, str | os.PathLike)
    return isinstance(value, kind)


def template_value_problem(cfg: DictConfig) -> str | None:
    """One line naming the first bad value of the template's own knobs (TEMPLATE_KEYS and
    TEMPLATE_CHOICES), or None."""
    for key, (kind, low, expected) in TEMPLATE_KEYS.items():
        value = _value(cfg, key)
        if value is _MISSING or value is None:
            continue
        if not _is(value, kind) or (low is not None and value < low):
            return f"{key}={value!r} is invalid: expected {expected}"
    for key, choices in TEMPLATE_CHOICES.items():
        value = _value(cfg, key)
        if value is not _MISSING and value not in choices:
            named = ", ".join("null" if c is None else c for c in choices)
            return f"{key}={value!r} is invalid: expected one of {named}"
    return None


def _simple_types(annotation: Any) -> tuple[type, ...] | None:
    """The plain classes an annotation allows, or None when it is not that simple (generics,
    callables, Any): then the value is not checked."""
    arms = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    if not all(isinstance(arm, type) for arm in arms):
        return None
    return tuple(arms)


def _annotation_problem(node: DictConfig, path: str) -> str | None:
    target = node.get("_target_")
    try:
        obj = get_object(str(target))
        func = obj.__init__ if inspect.isclass(obj) else obj
        hints = typing.get_type_hints(func)
    except Exception:  # not importable here or unreadable hints: instantiate reports it
        return None
    name = getattr(obj, "__name__", str(target))
    for key in node:
        key = str(key)
        if key.startswith("_") or key not in hints:
            continue
        value = _value(node, key)
        if value is _MISSING or value is None or OmegaConf.is_config(value):
            continue
        allowed = _simple_types(hints[key])
        if allowed is None or any(_is(value, kind) for kind in allowed):
            continue
        expected = " | ".join(kind.__name__ for kind in allowed)
        return f"{path}.{key}={value!r} is invalid: {name} expects {key}: {expected}"
    return None


def _targets(node: Any, path: str) -> list[tuple[DictConfig, str]]:
    found = []
    if OmegaConf.is_dict(node):
        if "_target_" in node:
            found.append((node, path))
        for key, child in node.items_ex(resolve=False):  # a child may need the running job
            if OmegaConf.is_config(child):
                found += _targets(child, f"{path}.{key}")
    return found


def target_value_problem(cfg: DictConfig) -> str | None:
    """One line naming the first value under `data` and `model` that its `_target_`'s annotations
    refuse, or None. Reading the annotations imports each class, and with it torch and Lightning:
    the checks that need no import come first (check_command_line)."""
    for root in ("data", "model"):
        node = cfg.get(root) if root in cfg else None
        for target, path in _targets(node, root):
            problem = _annotation_problem(target, path)
            if problem is not None:
                return problem
    return None
