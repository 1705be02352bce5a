"""Lightning's callback hook dispatch: a no-op hook still costs its callback a few microseconds."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, Checkpoint, EarlyStopping, ModelCheckpoint
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.trainer import call

from trainwell.compat.module_hooks import _set_fx_name

# ---------------------------------------------------------------------------------------------
# `_call_callback_hooks` (lightning/pytorch/trainer/call.py; Lightning 2.0-2.6.6, no upstream
# report found) calls every hook on every callback, including the base class's empty methods,
# and for each one builds the profiler's action name from `callback.state_key` (for a
# ModelCheckpoint a repr of its settings) inside a profiler context, even when no profiler is
# set. A training step dispatches ~8 hooks, so each installed callback costs ~8 of these calls
# per step whether or not it does anything: with the template's ~16 callbacks that is ~0.25 ms
# per step on a CPU core (measured by `benchmarks/pace.py host`), a few percent of a GPU step.
# Here, when no profiler is set, a callback whose class does not override the hook (and whose
# instance was not given one) is skipped: those calls would only have run `pass`; a hook no
# callback implements costs one lookup. With a
# profiler (debug=profiler) Lightning's own dispatch runs, so every action is still recorded.
# ---------------------------------------------------------------------------------------------

_overrides: dict[tuple[type, str], bool] = {}
# Per (hook, monitoring filter): the callback list it was planned for, and the callbacks in it
# that implement the hook. Re-planned when the list changes and at every `setup` (the first hook
# of each fit/validate/test), so a hook set on an instance before a run is always seen (one set
# during a run is seen from the next run on); walking all ~16 callbacks at each of the ~6 hooks
# of a step cost more than the hooks themselves. Dropped after `teardown`, the last hook of a
# run: a finished run's callbacks are not kept alive by the plan.
_plans: dict[tuple[str, bool | None], tuple[tuple[Callback, ...], tuple[Callback, ...]]] = {}
_MONITORING = (EarlyStopping, Checkpoint)


def _overrides_hook(callback: Callback, hook_name: str) -> bool:
    if hook_name in vars(callback):  # a hook set on the instance (tests, wrappers)
        return True
    key = (type(callback), hook_name)
    found = _overrides.get(key)
    if found is None:
        base = getattr(Callback, hook_name, None)
        found = _overrides[key] = base is None or getattr(type(callback), hook_name) is not base
    return found


# ---------------------------------------------------------------------------------------------
# ModelCheckpoint.on_train_batch_end (Lightning 2.0-2.6.6, no upstream report found) runs its
# state, step-count and clock checks after every training batch, even when the checkpoint saves
# only at epoch ends or after validation (no every_n_train_steps, no train_time_interval: the
# usual best-checkpoint configuration). Its checks then always end in `return` with nothing
# changed, so the dispatch skips that hook for such a checkpoint: ~5 µs per step for each one.
# ---------------------------------------------------------------------------------------------


def batch_check_never_saves(callback: Callback) -> bool:
    """A ModelCheckpoint whose own per-batch hook can never save (nor change its state)."""
    return (
        isinstance(callback, ModelCheckpoint)
        and "on_train_batch_end" not in vars(callback)
        and type(callback).on_train_batch_end is ModelCheckpoint.on_train_batch_end
        and callback._every_n_train_steps < 1
        and callback._train_time_interval is None
    )


def _skipped(callback: Callback, hook_name: str) -> bool:
    if not _overrides_hook(callback, hook_name):
        return True
    return hook_name == "on_train_batch_end" and batch_check_never_saves(callback)


def _implementing(
    callbacks: list[Callback], hook_name: str, monitoring_callbacks: bool | None
) -> tuple[Callback, ...]:
    key = (hook_name, monitoring_callbacks)
    listed = tuple(callbacks)
    plan = _plans.get(key)
    if plan is not None and plan[0] == listed and hook_name != "setup":
        return plan[1]
    if hook_name == "setup":
        _plans.clear()
    chosen = listed
    if monitoring_callbacks is not None:
        chosen = tuple(c for c in chosen if isinstance(c, _MONITORING) is monitoring_callbacks)
    implementing = tuple(c for c in chosen if not _skipped(c, hook_name))
    _plans[key] = (listed, implementing)
    return implementing


def skip_empty_callback_hooks() -> None:
    """Patch Lightning's callback dispatch once per process (idempotent)."""
    if getattr(call._call_callback_hooks, "_trainwell_skip_empty", False):
        return
    original = call._call_callback_hooks

    def dispatch(
        trainer: L.Trainer,
        hook_name: str,
        *args: Any,
        monitoring_callbacks: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(trainer.profiler, PassThroughProfiler):
            original(trainer, hook_name, *args, monitoring_callbacks=monitoring_callbacks, **kwargs)
            return
        implementing = _implementing(trainer.callbacks, hook_name, monitoring_callbacks)
        if implementing:  # else the hook name would only be set and put back
            pl_module = trainer.lightning_module
            if pl_module:
                previous = pl_module._current_fx_name
                _set_fx_name(pl_module, hook_name)
            for callback in implementing:
                fn = getattr(callback, hook_name)
                if callable(fn):
                    fn(trainer, pl_module, *args, **kwargs)
            if pl_module:
                _set_fx_name(pl_module, previous)
        if hook_name == "teardown":
            _plans.clear()

    dispatch._trainwell_skip_empty = True  # type: ignore[attr-defined]
    dispatch._trainwell_original = original  # type: ignore[attr-defined]  # benchmarks compare
    call._call_callback_hooks = dispatch
