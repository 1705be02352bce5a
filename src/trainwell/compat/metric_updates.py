"""torchmetrics' per-update bookkeeping: two nn.Module attribute writes per call, on the
training hot path."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
from torchmetrics import Metric

# ---------------------------------------------------------------------------------------------
# `Metric._wrap_update` (torchmetrics 1.0-1.9, no upstream report found) wraps every `update` in
# a function that clears the cached `_computed` and counts `_update_count`, both through
# Metric.__setattr__ and nn.Module.__setattr__ (a check of the constant names, then lookups in
# the parameter, module and buffer tables, for two plain values). A training step updates its
# metrics once each: with the wrapper ~10 µs per metric on a CPU core, about as much as the
# update's own kernels (`benchmarks/pace.py host`). The wrapper below keeps the same bookkeeping
# (the cache cleared, the count, the grad mode, the device message, the move of list states to
# the CPU) and stores the two values where nn.Module.__setattr__ stores a plain value: the
# instance's __dict__. Only the metrics that inherit LeanUpdate use it.
# ---------------------------------------------------------------------------------------------

_DEVICE_ERROR = "Expected all tensors to be on"
_NO_SWITCH = contextlib.nullcontext()


class LeanUpdate(Metric):
    """A torchmetrics Metric whose `update` bookkeeping skips nn.Module.__setattr__ (see above).
    Subclass it instead of Metric; the states, values and checkpoints are the same.

    `update_detaches = True` (a class attribute): the subclass's update only reads detached
    values or tensors without gradients (labels, counts, comparisons), so its states can never
    join an autograd graph, whatever the grad mode; its update then runs without torchmetrics'
    grad-mode switch (a context manager entered and left at every step).
    """

    update_detaches: bool = False

    def _wrap_update(self, update: Callable) -> Callable:
        # Called by Metric.__init__ and again after unpickling or copying (__setstate__).
        detaches = self.update_detaches

        @functools.wraps(update)
        def wrapped_func(*args: Any, **kwargs: Any) -> None:
            values = self.__dict__
            values["_computed"] = None
            values["_update_count"] += 1
            # `_enable_grad` is True only inside forward(): then the switch is always made.
            enable_grad = values["_enable_grad"]
            with (
                _NO_SWITCH if detaches and not enable_grad else torch.set_grad_enabled(enable_grad)
            ):
                try:
                    update(*args, **kwargs)
                except RuntimeError as err:
                    if _DEVICE_ERROR in str(err):
                        raise RuntimeError(
                            "Encountered different devices in metric calculation (see stacktrace "
                            f"for details). This could be due to the metric class not being on "
                            f"the same device as input. Instead of `metric="
                            f"{self.__class__.__name__}(...)` try to do `metric="
                            f"{self.__class__.__name__}(...).to(device)` where device corresponds "
                            "to the device of the input."
                        ) from err
                    raise
            if self.compute_on_cpu:
                self._move_list_states_to_cpu()

        return wrapped_func
