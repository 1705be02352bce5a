"""Counting the host-device synchronisations code would make on a GPU, on a machine without one.

On a GPU the host queues kernels and runs ahead; a call that needs a value the device computes
makes the host wait until the device has finished everything queued before it, and the device
then idles until the host queues the next kernel. `torch.cuda.set_sync_debug_mode` names those
calls on a GPU; on a CPU nothing waits, so it sees nothing. `SyncProbe` instead records every
call of the operations that synchronise on a GPU, with the line of code that made it:

* reading a tensor's values on the host: `.item()`, `.tolist()`, `.numpy()`, `.cpu()`, `bool()`,
  `float()`, `int()`, `operator.index()` (a tensor as an index or a range bound), `str()` /
  `repr()` / `format()` (printing a tensor), `torch.equal` and `torch.allclose` (a Python bool);
* operations whose output size depends on the values: `torch.nonzero`, `torch.unique`,
  `torch.masked_select` (the host must learn the size to allocate the result);
* `torch.tensor` / `torch.as_tensor` of host data with an explicit `device=` other than the
  string "cpu" (a blocking copy to the device).

Reads of values that stay on the host in a GPU run too are not counted: torch.optim's step
counts (`HOST_SIDE`).

Nested calls count once (printing a tensor calls `.tolist()` inside). Only the thread that opened
the probe is recorded (a checkpoint writer thread does not hold the training step).

Each record is attributed to the innermost frame outside torch, torchmetrics, lightning_utilities
and the standard library: `ours` (this checkout's src/trainwell and src/project: the template's
engine, task and callbacks), `lightning` (Lightning's loop, its callbacks and connectors) or
`other` (user code, tests, benchmarks).

Code that reads device values only on a GPU (`if device.type == "cpu": value = int(count)`,
where reading costs nothing) asks `trainwell.callbacks.cadence.host_reads_are_free`; the probe
answers it "no" while it is open, so the CPU run takes the GPU's code path.
"""

from __future__ import annotations

import sys
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning
import lightning_utilities
import torch
import torchmetrics

from trainwell.callbacks import cadence

REPO = Path(__file__).resolve().parents[1]


def _both(path: Path | str, folder: bool = True) -> tuple[str, ...]:
    """The path as written and with symlinks resolved (a venv may be a link): frames name
    files either way."""
    forms = {str(Path(path)), str(Path(path).resolve())}
    return tuple(f + "/" if folder else f for f in sorted(forms))


OURS = tuple(p for name in ("trainwell", "project") for p in _both(REPO / "src" / name))
LIGHTNING = _both(Path(lightning.__file__).parent)
_LIBRARIES = (
    *_both(Path(torch.__file__).parent),
    *_both(Path(torchmetrics.__file__).parent),
    *_both(Path(lightning_utilities.__file__).parent),
    *_both(sysconfig.get_paths()["stdlib"]),
    *_both(__file__, folder=False),
)
# Reads of tensors that stay on the host in a GPU run too: not syncs. torch.optim keeps each
# parameter's step count on the CPU (unless capturable or fused) and reads it in `_get_value`.
HOST_SIDE = (("torch/optim/optimizer.py", "_get_value"),)

# Tensor methods that make the host wait for the device's values.
READS = (
    "item",
    "tolist",
    "numpy",
    "cpu",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__repr__",
    "__str__",
    "__format__",
    "equal",
    "allclose",
    "nonzero",
    "unique",
    "masked_select",
)
# torch functions that do the same.
FUNCTIONS = ("equal", "allclose", "nonzero", "unique", "masked_select")
# torch functions that copy host data to a device when given one.
CREATIONS = ("tensor", "as_tensor")


@dataclass(frozen=True)
class Sync:
    call: str  # e.g. "Tensor.item"
    owner: str  # ours | lightning | other
    where: str  # file:line of the innermost frame outside the libraries


def owner_of(filename: str) -> str:
    if filename.startswith(OURS):
        return "ours"
    if filename.startswith(LIGHTNING):
        return "lightning"
    return "other"


def _shown(filename: str) -> str:
    """A frame's file as read in a report: relative to the checkout, or `lightning/...`."""
    for prefix in LIGHTNING:
        if filename.startswith(prefix):
            return "lightning/" + filename[len(prefix) :]
    try:
        return str(Path(filename).relative_to(REPO))
    except ValueError:
        return filename


def _host_side(frame: Any) -> bool:
    code = frame.f_code
    return any(code.co_filename.endswith(f) and code.co_name == n for f, n in HOST_SIDE)


def caller(frame: Any) -> tuple[str, str]:
    """(owner, file:line) of the innermost frame from `frame` outward outside the libraries."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_LIBRARIES) and not filename.startswith("<"):
            return owner_of(filename), f"{_shown(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return "other", "?"


class SyncProbe:
    """While open (a context manager, or `open()` / `close()`), records in `records` every call
    that would synchronise with a GPU, made by the opening thread."""

    def __init__(self) -> None:
        self.records: list[Sync] = []
        self._thread: int | None = None
        self._depth = 0
        self._saved: list[tuple[Any, str, Any, bool]] = []

    # -- recording ---------------------------------------------------------------------------
    def _wrap(self, name: str, original: Callable[..., Any], check: Callable[..., bool]) -> Any:
        probe = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if (
                probe._depth
                or threading.get_ident() != probe._thread
                or not check(*args, **kwargs)
                or _host_side(sys._getframe(1))
            ):
                return original(*args, **kwargs)
            owner, where = caller(sys._getframe(1))
            probe.records.append(Sync(name, owner, where))
            probe._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                probe._depth -= 1

        wrapper.__name__ = getattr(original, "__name__", name)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        return wrapper

    def _patch(self, owner: Any, attr: str, label: str, check: Callable[..., bool]) -> None:
        own = attr in vars(owner)
        original = getattr(owner, attr)
        self._saved.append((owner, attr, original, own))
        setattr(owner, attr, self._wrap(label, original, check))

    # -- opening and closing -----------------------------------------------------------------
    def open(self) -> SyncProbe:
        if self._thread is not None:
            raise RuntimeError("SyncProbe is already open")
        self._thread = threading.get_ident()
        always = lambda *args, **kwargs: True  # noqa: E731
        for name in READS:
            self._patch(torch.Tensor, name, f"Tensor.{name}", always)
        for name in FUNCTIONS:
            self._patch(torch, name, f"torch.{name}", always)
        for name in CREATIONS:
            self._patch(torch, name, f"torch.{name}(device=)", _copies_host_data_to_a_device)
        self._saved.append((cadence, "host_reads_are_free", cadence.host_reads_are_free, True))
        cadence.host_reads_are_free = lambda device: False
        return self

    def close(self) -> None:
        for owner, attr, original, own in reversed(self._saved):
            if own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)
        self._saved.clear()
        self._thread = None

    def __enter__(self) -> SyncProbe:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def take(self) -> list[Sync]:
        """The records since the last take, removed from the probe."""
        taken, self.records = self.records, []
        return taken


def _copies_host_data_to_a_device(data: Any = None, *args: Any, **kwargs: Any) -> bool:
    # `device="cpu"` written out is the host in a GPU run too (torch.optim's step counts); a
    # device object or another name is the run's device (the CPU here, a GPU there).
    device = kwargs.get("device")
    return device is not None and device != "cpu" and not isinstance(data, torch.Tensor)
