"""Lightning's per-step plumbing around the module: hook dispatch and the training_step
signature, a few microseconds each, ~20 times a step."""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch
from lightning.pytorch.core.hooks import ModelHooks
from lightning.pytorch.loops import training_epoch_loop
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.trainer import call
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

# ---------------------------------------------------------------------------------------------
# `_call_lightning_module_hook` and `_call_strategy_hook` (lightning/pytorch/trainer/call.py;
# Lightning 2.0-2.6.6, no upstream report found) format a debug message and a profiler action
# name, and enter the profiler's context, for every hook of every step even when no profiler is
# set, and record the running hook's name on the module through nn.Module.__setattr__ (a lookup
# in its parameter, module and buffer tables). A training step calls ~17 of them: ~40 µs of a
# CPU step (`benchmarks/pace.py host`), paid before any hook runs. Here, when no profiler is set
# and debug logging is off, the hook runs with the same `_current_fx_name` bracketing and
# nothing else, and a per-batch hook the module inherits empty is not called at all; otherwise
# Lightning's own functions run.
# ---------------------------------------------------------------------------------------------

_log = logging.getLogger(call.__name__)

# The per-batch module hooks whose LightningModule implementation is empty (a docstring, no
# statement; Lightning 2.0-2.6.6, checked by tests/test_compat.py): a module that inherits one
# runs nothing in it, so the lean dispatch returns None (what the empty hook returns) without the
# hook-name bracketing around it. Six of them in every training step.
_EMPTY_PER_BATCH = frozenset(
    {
        "on_train_batch_start",
        "on_train_batch_end",
        "on_before_zero_grad",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_validation_batch_start",
        "on_validation_batch_end",
        "on_test_batch_start",
        "on_test_batch_end",
        "on_predict_batch_start",
        "on_predict_batch_end",
    }
)
_inherited: dict[tuple[type, str], bool] = {}


def _inherits_empty(pl_module: L.LightningModule, hook_name: str) -> bool:
    if hook_name not in _EMPTY_PER_BATCH or hook_name in vars(pl_module):
        return False  # another hook, or one set on the instance
    key = (type(pl_module), hook_name)
    found = _inherited.get(key)
    if found is None:
        found = _inherited[key] = getattr(type(pl_module), hook_name) is getattr(
            ModelHooks, hook_name
        )
    return found


_MODULE_SETATTR = torch.nn.Module.__setattr__
_plain_setattr: dict[type, bool] = {}


def _set_fx_name(pl_module: L.LightningModule, name: str | None) -> None:
    # The plain store nn.Module.__setattr__ ends in for a string; a module that defines its own
    # __setattr__ keeps it. Asked once per module class: ~30 stores per training step.
    kind = type(pl_module)
    plain = _plain_setattr.get(kind)
    if plain is None:
        plain = _plain_setattr[kind] = kind.__setattr__ is _MODULE_SETATTR
    if plain:
        object.__setattr__(pl_module, "_current_fx_name", name)
    else:
        pl_module._current_fx_name = name


def _lean(trainer: L.Trainer) -> bool:
    return isinstance(trainer.profiler, PassThroughProfiler) and not _log.isEnabledFor(
        logging.DEBUG
    )


def lean_module_hooks() -> None:
    """Patch Lightning's module and strategy hook dispatch once per process (idempotent)."""
    if getattr(call._call_lightning_module_hook, "_trainwell_lean", False):
        return
    module_original = call._call_lightning_module_hook
    strategy_original = call._call_strategy_hook

    def module_hook(
        trainer: L.Trainer,
        hook_name: str,
        *args: Any,
        pl_module: L.LightningModule | None = None,
        **kwargs: Any,
    ) -> Any:
        if not _lean(trainer):
            return module_original(trainer, hook_name, *args, pl_module=pl_module, **kwargs)
        pl_module = pl_module or trainer.lightning_module
        if pl_module is None:
            raise TypeError("No `LightningModule` is available to call hooks on.")
        if _inherits_empty(pl_module, hook_name):
            return None
        fn = getattr(pl_module, hook_name)
        if not callable(fn):
            return None
        previous = pl_module._current_fx_name
        _set_fx_name(pl_module, hook_name)
        output = fn(*args, **kwargs)
        _set_fx_name(pl_module, previous)
        return output

    def strategy_hook(trainer: L.Trainer, hook_name: str, *args: Any, **kwargs: Any) -> Any:
        if not _lean(trainer):
            return strategy_original(trainer, hook_name, *args, **kwargs)
        pl_module = trainer.lightning_module
        previous = pl_module._current_fx_name
        _set_fx_name(pl_module, hook_name)
        fn = getattr(trainer.strategy, hook_name)
        if not callable(fn):
            return None
        output = fn(*args, **kwargs)
        _set_fx_name(pl_module, previous)
        return output

    for patched, original in ((module_hook, module_original), (strategy_hook, strategy_original)):
        patched._trainwell_lean = True  # type: ignore[attr-defined]
        patched._trainwell_original = original  # type: ignore[attr-defined]  # benchmarks compare
    call._call_lightning_module_hook = module_hook
    call._call_strategy_hook = strategy_hook


# ---------------------------------------------------------------------------------------------
# TrainingEpochLoop._build_kwargs (Lightning 2.0-2.6.6, no upstream report found) inspects
# training_step's signature (inspect.getfullargspec) at every batch to decide whether to pass
# `batch_idx`: ~15 µs of a CPU step. The answer depends on the function alone, so it is kept per
# function (a method's underlying function: another training_step, even one assigned to the
# instance mid-run, is inspected afresh).
# ---------------------------------------------------------------------------------------------

_signatures: dict[tuple[Any, str, bool, int | None], bool] = {}


def _param_in_signature(
    hook_fx: Any, param: str, explicit: bool = False, min_args: int | None = None
) -> bool:
    key = (getattr(hook_fx, "__func__", hook_fx), param, explicit, min_args)
    try:
        found = _signatures.get(key)
    except TypeError:  # an unhashable callable object: inspected every time, as upstream does
        return is_param_in_hook_signature(hook_fx, param, explicit, min_args)
    if found is None:
        found = _signatures[key] = is_param_in_hook_signature(hook_fx, param, explicit, min_args)
    return found


_param_in_signature._trainwell_original = is_param_in_hook_signature  # type: ignore[attr-defined]


def cache_training_step_signature() -> None:
    """Patch the training loop's signature check once per process (idempotent)."""
    if training_epoch_loop.is_param_in_hook_signature is not _param_in_signature:
        training_epoch_loop.is_param_in_hook_signature = _param_in_signature


# ---------------------------------------------------------------------------------------------
# _DataHookSelector.get_instance (Lightning 2.0-2.6.6, no upstream report found) asks, for each
# of the three batch-transfer hooks of every batch, whether the datamodule and then the module
# override it (`is_overridden`: two class walks per hook): ~30 µs of a CPU step, paid only by runs
# with a datamodule (`benchmarks/pace.py host`). Lightning builds one selector per fit from the
# module and the datamodule, whose classes do not change during it, so each hook's answer is
# kept on that selector: the next fit builds a new one and asks afresh.
# ---------------------------------------------------------------------------------------------


def cache_data_hook_instances() -> None:
    """Patch the batch-transfer hook selector once per process (idempotent)."""
    from lightning.pytorch.trainer.connectors.data_connector import _DataHookSelector

    original = _DataHookSelector.get_instance
    if getattr(original, "_trainwell_original", None) is not None:
        return

    def get_instance(self: Any, hook_name: str) -> Any:
        kept = self.__dict__.setdefault("_trainwell_instances", {})
        found = kept.get(hook_name)
        if found is None:  # an invalid name raises, as upstream does, and is not kept
            found = kept[hook_name] = original(self, hook_name)
        return found

    get_instance._trainwell_original = original  # type: ignore[attr-defined]
    _DataHookSelector.get_instance = get_instance  # type: ignore[method-assign]
