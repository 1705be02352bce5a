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

from trainwell.training.lr_scaling import RULES

# key: (type, smallest allowed value, largest allowed value, what the value means). The one
# home of these rules: the command line is checked against it before anything prints, and every
# job again (cli.py) before it starts, so no later code re-checks a value listed here. A key
# absent from a script's config (serve.yaml has no `seed`) is skipped; null means "off" or
# "the default" for every key listed.
TEMPLATE_KEYS: dict[str, tuple[type, float | None, float | None, str]] = {
    "seed": (int, None, None, "an integer"),
    "data.batch_size": (int, 1, None, "an integer >= 1 (the micro-batch)"),
    "data.num_workers": (int, 0, None, "an integer >= 0"),
    "trainer.max_epochs": (int, -1, None, "an integer >= -1 (-1: no limit)"),
    "trainer.max_steps": (int, -1, None, "an integer >= -1 (-1: no limit)"),
    "trainer.accumulate_grad_batches": (int, 1, None, "an integer >= 1"),
    "model.optimizer.lr": (float, 0, None, "a number >= 0"),
    "ema.decay": (float, 0, 1, "a number in [0, 1] (0.999 is usual) or null (off)"),
    "ema.update_every_n_steps": (int, 1, None, "an integer >= 1"),
    "ema.update_starting_at_step": (int, 0, None, "an integer >= 0 (0-based) or null"),
    "ema.use_buffers": (bool, None, None, "true or false"),
    "cv.folds": (int, 2, None, "an integer >= 2 (the number of folds) or null (off)"),
    "cv.fold": (int, 0, None, "an integer >= 0 (the one fold to train) or null (all)"),
    "lr_scaling.reference_batch": (int, 1, None, "an integer >= 1 (the batch the LR is for)"),
    "resume_allow_batch_change": (bool, None, None, "true or false"),
    "test": (bool, None, None, "true or false"),
    "print_config": (bool, None, None, "true or false"),
    "doctor": (bool, None, None, "true or false"),
    "doctor_allow_fail": (bool, None, None, "true or false"),
    "overwrite": (bool, None, None, "true or false"),  # predict.yaml, export.yaml
    "top_k": (int, 1, None, "an integer >= 1"),  # predict.yaml
    "parity_tolerance": (float, None, None, "a number"),  # export.yaml (< 0: parity always fails)
    # serve.yaml
    "port": (int, 0, 65535, "an integer in [0, 65535]"),
    "max_batch_size": (int, 1, None, "an integer >= 1"),
    "batch_timeout": (float, 0, None, "a number of seconds >= 0"),
    "workers": (int, 1, None, "an integer >= 1"),
    "threads": (int, 0, None, "an integer >= 0 (0: one per core)"),
    "fast_queue": (bool, None, None, "true or false"),
    "max_body_bytes": (int, 1, None, "an integer >= 1"),
    "drain_timeout": (float, 0, None, "a number of seconds >= 0"),
}

# key: the values it may take (null among them only where it means something)
TEMPLATE_CHOICES: dict[str, tuple[str | None, ...]] = {
    "monitor.mode": ("min", "max"),  # train.yaml; ModelCheckpoint and EarlyStopping read it
    "lr_scaling.rule": RULES,  # train.yaml
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
    for key, (kind, low, high, expected) in TEMPLATE_KEYS.items():
        value = _value(cfg, key)
        if value is _MISSING or value is None:
            continue
        if (
            not _is(value, kind)
            or (low is not None and value < low)
            or (high is not None and value > high)
        ):
            return f"{key}={value!r} is invalid: expected {expected}"
    for key, choices in TEMPLATE_CHOICES.items():
        value = _value(cfg, key)
        if value is not _MISSING and value not in choices:
            named = ", ".join("null" if c is None else c for c in choices)
            return f"{key}={value!r} is invalid: expected one of {named}"
    return _fold_problem(cfg)


def _fold_problem(cfg: DictConfig) -> str | None:
    """`cv.fold` (one fold of K as its own job) means something only beside `cv.folds=K`."""
    fold, folds = _value(cfg, "cv.fold"), _value(cfg, "cv.folds")
    if fold is _MISSING or fold is None:
        return None
    if folds is _MISSING or folds is None:
        return f"cv.fold={fold} needs cv.folds, the number of folds it is one of"
    try:
        index = int(fold)  # '${oc.env:SLURM_ARRAY_TASK_ID}' resolves to a string
    except (TypeError, ValueError):
        return None  # the run names it with its fold assignment
    if isinstance(folds, int) and not 0 <= index < folds:
        return f"cv.fold={fold}: choose a fold from 0 to {folds - 1} (cv.folds={folds})"
    return None


def simple_types(annotation: Any) -> tuple[type, ...] | None:
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
        allowed = simple_types(hints[key])
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
