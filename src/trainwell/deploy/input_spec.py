"""What a model takes, and every rule a batch of its inputs is checked against, in one place.

An `InputSpec` is built once, from a datamodule's `raw_form()` (or the batch form its loaders
yield: deploy/raw.py) or from an export's manifest (`from_manifest`), and everything that hands
samples to a model checks them through `InputSpec.check`: the server's request bodies, JSON or
.npy (deploy/serve.py), predict's `input=` files (deploy/predict.py) and export's parity samples
(deploy/export.py). Readers only read: deploy/request.py turns a body into an array, and
deploy/raw_input.py a file; neither judges the values.

The rules, in the order they are checked (the first broken one is the one-line answer):
- numbers: no booleans, strings or objects;
- shape: at least one sample, each of the declared shape; a dynamic axis (`None`: a token
  model's sequence) holds at least one value and, where named "sequence", at most
  `max_sequence`;
- dtype: an integer input takes integers (3, not 3.0: a float array for a uint8 image is far more
  often a scaled image than a whole one);
- finite: no NaN or infinity;
- range: every value inside the declared `range`;
- cast: every value held by the model's dtype (1e39 is finite in float64 and infinite in float32;
  300 wraps to 44 in uint8);
- padding (`pad`: right-padded rows of ids): each row starts with a real id and ends in its
  padding run, if any.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwell.errors import TrainwellError


class InputRefused(TrainwellError):
    """Samples that break the spec: the server answers 400 with this line, predict and export
    exit 2 with it."""


BATCH = "batch"
SEQUENCE = "sequence"  # the dynamic axis `max_sequence` limits


@dataclass(frozen=True)
class InputSpec:
    dtype: str
    shape: tuple[int | None, ...]  # None: a dynamic axis; axis 0 is the batch
    description: str = ""
    range: tuple[float, float] | None = None
    name: str = "inputs"
    dynamic_axes: tuple[tuple[int, str], ...] = ((0, BATCH),)
    max_sequence: int | None = None
    pad: int | None = None  # the id that right-pads a row of token ids (N, T)
    form: str = "raw"  # "raw", or "batch": the model input as the loaders yield it

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any], owner: str) -> InputSpec:
        """The spec a raw_form()'s `input` or a manifest's `input` describes; a malformed one is
        one line naming `owner` (where the dict came from)."""
        missing = [key for key in ("dtype", "shape") if key not in entry]
        if missing:
            raise TrainwellError(f"{owner} lacks {', '.join(missing)}")
        try:
            dtype = np.dtype(entry["dtype"])
        except TypeError:
            raise TrainwellError(
                f"{owner}: dtype {entry['dtype']!r} is not a numpy dtype"
            ) from None
        if dtype.kind not in "uif":
            raise TrainwellError(f"{owner}: dtype {dtype.name} is not a numeric dtype")
        shape = tuple(None if size is None else int(size) for size in entry["shape"])
        if not shape or shape[0] is not None:
            raise TrainwellError(
                f"{owner}: shape {list(entry['shape'])} must open with None (batch)"
            )
        named = {int(axis): str(name) for axis, name in (entry.get("dynamic_axes") or {}).items()}
        named.setdefault(0, BATCH)
        dynamic = {axis for axis, size in enumerate(shape) if size is None}
        if set(named) != dynamic:
            raise TrainwellError(
                f"{owner}: dynamic_axes {named} must name exactly the None axes of shape "
                f"{list(shape)}"
            )
        low_high = entry.get("range")
        pad = entry.get("pad")
        if pad is not None and len(shape) != 2:
            raise TrainwellError(f"{owner}: pad is for rows of ids, shape [None, None]")
        longest = entry.get("max_sequence")
        return cls(
            dtype=dtype.name,
            shape=shape,
            description=str(entry.get("description") or ""),
            range=None if low_high is None else (low_high[0], low_high[1]),
            name=str(entry.get("name") or "inputs"),
            dynamic_axes=tuple(sorted(named.items())),
            max_sequence=None if longest is None else int(longest),
            pad=None if pad is None else int(pad),
            form=str(entry.get("form") or "raw"),
        )

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> InputSpec:
        return cls.from_dict(manifest["input"], "manifest.json's input")

    def manifest(self) -> dict[str, Any]:
        """The manifest's `input` entry (deploy/artifact.py); `from_dict` reads it back."""
        entry: dict[str, Any] = {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "dynamic_axes": {str(axis): name for axis, name in self.dynamic_axes},
            "range": None if self.range is None else list(self.range),
            "description": self.description,
            "form": self.form,
        }
        if self.max_sequence is not None:
            entry["max_sequence"] = self.max_sequence
        if self.pad is not None:
            entry["pad"] = self.pad
        return entry

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def check(self, samples: np.ndarray, where: str = "") -> np.ndarray:
        """`samples` as the model's dtype, C-contiguous, once every rule holds; else InputRefused
        with one line (prefixed with `where`, such as `input=samples.npy`)."""
        try:
            return self._check(np.asarray(samples))
        except InputRefused as err:
            if where:
                raise InputRefused(f"{where}: {err}") from None
            raise

    def _check(self, samples: np.ndarray) -> np.ndarray:
        dtype = np.dtype(self.dtype)
        if samples.dtype.kind not in "uif":  # bool, strings, objects, complex, dates
            kind = "booleans" if samples.dtype.kind == "b" else samples.dtype.name
            raise InputRefused(f"inputs are {kind}, expected numbers ({self.dtype})")
        self._check_shape(samples)
        floats = samples.dtype.kind == "f"
        if dtype.kind in "ui" and floats:
            raise InputRefused(
                f"inputs are floating-point numbers; the model takes {self.dtype} integers "
                "(send 3, not 3.0)"
            )
        if floats and not np.isfinite(samples).all():
            raise InputRefused("inputs contain NaN or infinity")
        bounds = None  # (min, max) of the samples, once computed
        if self.range is not None:
            bounds = low, high = samples.min(), samples.max()
            if low < self.range[0] or high > self.range[1]:
                raise InputRefused(
                    f"inputs must lie in [{self.range[0]}, {self.range[1]}], got values in "
                    f"[{low}, {high}]" + (f" ({self.description})" if self.description else "")
                )
        if np.can_cast(samples.dtype, dtype, "safe"):  # uint8 into uint8, int64 into float64
            cast = samples.astype(dtype, copy=False)
        elif dtype.kind in "ui":
            info = np.iinfo(dtype)
            # A declared range inside the dtype's has bounded the values already.
            if self.range is None or not info.min <= self.range[0] <= self.range[1] <= info.max:
                low, high = bounds or (samples.min(), samples.max())
                if low < info.min or high > info.max:  # 300 would wrap to 44 in uint8
                    raise InputRefused(
                        f"inputs overflow {self.dtype}: values in [{low}, {high}], the dtype "
                        f"holds [{info.min}, {info.max}]"
                    )
            cast = samples.astype(dtype)
        else:
            with np.errstate(over="ignore"):  # checked just below
                cast = samples.astype(dtype)
            # 1e39 is finite in float64 and infinite in float32: the model would see infinity.
            if not np.isfinite(cast).all():
                big = float(np.abs(samples).max())
                raise InputRefused(f"inputs overflow {self.dtype} (|value| up to {big:g})")
        if self.pad is not None:
            self._check_padding(cast)
        return np.ascontiguousarray(cast)

    def _check_shape(self, samples: np.ndarray) -> None:
        want = [self._axis_label(axis) for axis in range(1, self.ndim)]
        got = list(samples.shape[1:])
        if samples.ndim != self.ndim or any(
            size is not None and size != samples.shape[axis]
            for axis, size in enumerate(self.shape)
            if axis > 0
        ):
            about = f" ({self.description})" if self.description else ""
            raise InputRefused(f"each sample must have shape {want}, got {got}{about}")
        if len(samples) == 0:
            raise InputRefused("there are no samples; send at least one")
        for axis, name in self.dynamic_axes:
            if axis == 0:
                continue
            if samples.shape[axis] == 0:
                raise InputRefused(
                    f"samples have no values along axis {axis} ({name}); each needs at least one"
                )
            if name == SEQUENCE and self.max_sequence and samples.shape[axis] > self.max_sequence:
                raise InputRefused(
                    f"sequences are {samples.shape[axis]} long, over the limit of "
                    f"{self.max_sequence}"
                )

    def _axis_label(self, axis: int) -> int | str:
        size = self.shape[axis]
        return dict(self.dynamic_axes)[axis] if size is None else size

    def _check_padding(self, rows: np.ndarray) -> None:
        lengths = self.lengths(rows)
        after = np.arange(rows.shape[1]) >= lengths[:, None]
        empty = np.flatnonzero(lengths < 1)
        mixed = np.flatnonzero((after & (rows != self.pad)).any(axis=1))
        if empty.size or mixed.size:
            row = int(min([*empty[:1], *mixed[:1]]))
            what = "is all padding" if row in empty[:1] else "has a real id after its padding"
            raise InputRefused(
                f"row {row} {what} (id {self.pad}): each row starts with a real id and ends in "
                "its padding run, if any (right padding only)"
            )

    def lengths(self, rows: np.ndarray) -> np.ndarray:
        """Real ids per row of right-padded ids: up to the first `pad`."""
        padded = rows == self.pad
        return np.where(padded.any(axis=1), padded.argmax(axis=1), rows.shape[1])
