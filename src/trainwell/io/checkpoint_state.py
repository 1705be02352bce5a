"""State people keep, saved in a form a weights-only load reads, and read back as what it was.

A checkpoint holds more than weights: the datamodule's `state_dict()` (statistics fitted on the
training split: `scaler.mean_`, an `np.float64` std), what a module adds in `on_save_checkpoint`,
callbacks' states, hyper-parameters. torch pickles a numpy array or scalar as a call into numpy,
which a weights-only load (the only kind trainwell does) refuses: the run would train to its end
and then fail to test, resume, evaluate or export. trainwell never widens what unpickling may run;
it writes such values as data instead, and every reader turns that data back into the values:

* a numpy array -> `{TAG: "numpy.ndarray", "dtype": ..., "shape": [...], "data": <tensor>}`,
  the data a tensor of the array's own dtype where torch has one (floats, ints, bools, complex
  in native byte order), else the array's raw bytes as uint8 (strings, datetimes, structured,
  big-endian); it comes back as a numpy array of the same dtype, shape and bits;
* a numpy scalar (`np.float64(0.5)`, `np.int64(3)`, `np.str_`) -> `{TAG: "numpy.scalar", ...}`,
  back as the same numpy scalar type;
* a dict whose keys are not plain (numpy integers from `np.unique`), or a user's dict that holds
  TAG itself -> `{TAG: "dict", "items": [[key, value], ...]}`; a set or frozenset holding more
  than plain values -> `{TAG: "set" | "frozenset", "items": [...]}`;
* tensors, Python scalars, strings, bytes, None, torch dtypes / devices / sizes, and lists,
  tuples, dicts and OrderedDicts of all of these stay as they are (a tuple stays a tuple).

Anything else (a fitted scikit-learn object, a dataclass, a namedtuple, a defaultdict) cannot
be saved without pickling code: `encode_state` raises `UnsavableStateError`, one line naming the
key path and the type. Every write encodes (io/hparams.py `plain_checkpoint`), every read
decodes (io/checkpoint_read.py `load_checkpoint_file`), and a run writes and reads its first
checkpoint before its first training step (callbacks/checkpoint_rehearsal.py), so a type that
cannot be saved stops the run there.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from trainwell.errors import TrainwellError

TAG = "__trainwell_state__"
_NDARRAY, _SCALAR, _DICT, _SET, _FROZENSET = (
    "numpy.ndarray",
    "numpy.scalar",
    "dict",
    "set",
    "frozenset",
)
# Values a weights-only load returns as they were saved (exact types: np.float64 is a float
# subclass and np.str_ a str subclass, and both are pickled as numpy calls).
_LEAVES = frozenset(
    {
        str, bytes, bytearray, int, float, bool, complex, type(None),
        torch.dtype, torch.device, torch.Size,
    }
)  # fmt: skip
_KEYS = frozenset({str, bytes, int, float, bool, complex, type(None)})
# numpy kinds whose arrays torch.from_numpy reads as a tensor of the same dtype.
_TENSOR_KINDS = frozenset("biufc")


class UnsavableStateError(TrainwellError):
    """A value in a checkpoint that only pickled code could save."""

    def __init__(self, path: str, value: Any, why: str = "") -> None:
        self.path, self.value_type = path, _type_name(value)
        self.why = why
        super().__init__(self.line())

    def line(self) -> str:
        return (
            f"{self.path}{_hint(self.path)} is a {self.value_type}{self.why}, which a checkpoint "
            "cannot hold (only pickled code rebuilds it; checkpoints load weights-only): keep "
            "numpy arrays and scalars, numbers, strings, tensors and lists, tuples and dicts of "
            "them there (a fitted object's arrays, such as a scaler's mean_ and scale_, not the "
            "object)"
        )


class _Refused(Exception):
    """Raised deep in the walk; each level on the way out adds its key to the path."""

    def __init__(self, value: Any, why: str = "") -> None:
        super().__init__()
        self.value, self.why = value, why
        self.keys: list[str] = []


def encode_state(value: Any, name: str = "checkpoint") -> Any:
    """`value` with every numpy value (and non-plain dict key) as weights-only data.

    Containers holding nothing to encode are returned as they are (the same objects: a module's
    state_dict keeps its `_metadata`); a container with something to encode is copied, never
    changed in place. Raises UnsavableStateError naming the key path of a value that cannot be
    saved. `name`: the path's root in that message."""
    try:
        return _encode(value)
    except _Refused as refused:
        path = name + "".join(reversed(refused.keys))
        raise UnsavableStateError(path, refused.value, refused.why) from None


def is_numpy_scalar(node: Any) -> bool:
    """`node` is an encoded numpy scalar."""
    return type(node) is dict and node.get(TAG) == _SCALAR


def decode_state(value: Any) -> Any:
    """What `encode_state` encoded, as the values it was (a loaded checkpoint, or any part)."""
    return _decode(value)


def _encode(value: Any) -> Any:
    kind = type(value)
    if kind in _LEAVES or isinstance(value, torch.Tensor):
        return value
    if kind is dict or kind is OrderedDict:
        if TAG in value or not all(_plain_key(k) for k in value):
            return {TAG: _DICT, "ordered": kind is OrderedDict, "items": _encode_items(value)}
        return _copy_changed(value)
    if kind is list or kind is tuple:
        items = [_at(i, v) for i, v in enumerate(value)]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if kind is list else tuple(items)
    if kind is set or kind is frozenset:
        if kind is set and all(_plain_key(v) for v in value):
            return value
        return {TAG: _SET if kind is set else _FROZENSET, "items": [_encode(v) for v in value]}
    if isinstance(value, np.ndarray) and kind is np.ndarray:
        return {TAG: _NDARRAY, **_array(value)}
    if isinstance(value, np.generic):
        return {TAG: _SCALAR, **_array(np.asarray(value))}
    raise _Refused(value)


def _at(key: Any, value: Any) -> Any:
    try:
        return _encode(value)
    except _Refused as refused:
        refused.keys.append(f"[{key!r}]")
        raise


def _plain_key(key: Any) -> bool:
    kind = type(key)
    return kind in _KEYS or (kind is tuple and all(_plain_key(k) for k in key))


def _copy_changed(container: Any) -> Any:
    changed = {}
    for key, value in container.items():
        encoded = _at(key, value)
        if encoded is not value:
            changed[key] = encoded
    return _with(container, changed)


def _with(container: Any, changed: dict[Any, Any]) -> Any:
    """`container`, or a copy of it with `changed` entries (same type; an OrderedDict state_dict
    keeps the `_metadata` attribute its load_state_dict reads)."""
    if not changed:
        return container
    copy = container.copy()
    if hasattr(container, "_metadata"):
        copy._metadata = container._metadata
    copy.update(changed)
    return copy


def _encode_items(mapping: Any) -> list[list[Any]]:
    out = []
    for key, value in mapping.items():
        try:
            encoded_key = _encode(key)
        except _Refused as refused:
            refused.why = f" in the dict key {key!r}{refused.why}"
            refused.keys = []
            raise
        out.append([encoded_key, _at(key, value)])
    return out


def _array(array: np.ndarray) -> dict[str, Any]:
    if array.dtype.hasobject:
        raise _Refused(array, " of dtype object")
    contiguous = np.ascontiguousarray(array)
    if not contiguous.flags.writeable:  # torch warns on a tensor over read-only memory
        contiguous = contiguous.copy()
    fields = {"dtype": np.lib.format.dtype_to_descr(array.dtype), "shape": list(array.shape)}
    if array.dtype.kind in _TENSOR_KINDS and array.dtype.isnative:
        try:
            return {**fields, "data": torch.from_numpy(contiguous)}
        except TypeError:  # a dtype this torch has no tensor for (uint16 on older releases)
            pass
    raw = contiguous.reshape(-1).view(np.uint8)
    return {**fields, "data": torch.from_numpy(raw.copy()), "raw": True}


def _decode(value: Any) -> Any:
    kind = type(value)
    if kind is dict or kind is OrderedDict:
        tag = value.get(TAG)
        if tag is not None and kind is dict:
            return _decode_tagged(tag, value)
        return _decode_changed(value)
    if kind is list or kind is tuple:
        items = [_decode(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if kind is list else tuple(items)
    return value


def _decode_changed(container: Any) -> Any:
    changed = {}
    for key, value in container.items():
        decoded = _decode(value)
        if decoded is not value:
            changed[key] = decoded
    return _with(container, changed)


def _decode_tagged(tag: str, value: dict[str, Any]) -> Any:
    if tag == _NDARRAY:
        return _read_array(value)
    if tag == _SCALAR:
        return _read_array(value)[()]
    if tag == _DICT:
        pairs = [(_decode(k), _decode(v)) for k, v in value["items"]]
        return OrderedDict(pairs) if value.get("ordered") else dict(pairs)
    if tag == _SET:
        return {_decode(v) for v in value["items"]}
    if tag == _FROZENSET:
        return frozenset(_decode(v) for v in value["items"])
    return _decode_changed(value)  # a tag this release does not know: left as data


def _read_array(value: dict[str, Any]) -> np.ndarray:
    dtype = np.lib.format.descr_to_dtype(value["dtype"])
    data = value["data"].cpu().numpy()  # a reader may have mapped the checkpoint to a GPU
    if value.get("raw"):
        return np.frombuffer(data.tobytes(), dtype=dtype).reshape(value["shape"]).copy()
    return data.reshape(value["shape"])


def first_difference(
    saved: Any, loaded: Any, path: str = "checkpoint", array_bits: bool = True
) -> str | None:
    """Where `loaded` differs from `saved` in type, shape or bits: one phrase, or None.

    Tensors are compared by dtype and shape (their bytes are torch's own to write); numpy values
    by dtype, shape and bytes (`array_bits=False`: arrays by dtype and shape, for a round trip
    that carried stand-ins of their data); floats by their bits (NaN equals NaN, -0.0 differs
    from 0.0)."""
    if isinstance(saved, torch.Tensor):
        if not isinstance(loaded, torch.Tensor):
            return f"{path}: a tensor came back as a {_type_name(loaded)}"
        if saved.dtype != loaded.dtype or saved.shape != loaded.shape:
            return f"{path}: a {saved.dtype} tensor {tuple(saved.shape)} came back as {loaded.dtype} {tuple(loaded.shape)}"
        return None
    if type(saved) is not type(loaded):
        return f"{path}: a {_type_name(saved)} came back as a {_type_name(loaded)}"
    if isinstance(saved, dict):
        if list(saved) != list(loaded):
            return f"{path}: keys {list(saved)[:6]} came back as {list(loaded)[:6]}"
        for key, value in saved.items():
            found = first_difference(value, loaded[key], f"{path}[{key!r}]", array_bits)
            if found:
                return found
        return None
    if isinstance(saved, (list, tuple)):
        if len(saved) != len(loaded):
            return f"{path}: {len(saved)} items came back as {len(loaded)}"
        for i, (a, b) in enumerate(zip(saved, loaded, strict=True)):
            found = first_difference(a, b, f"{path}[{i}]", array_bits)
            if found:
                return found
        return None
    if isinstance(saved, (np.ndarray, np.generic)):
        a, b = np.asarray(saved), np.asarray(loaded)
        bits = array_bits or isinstance(saved, np.generic)
        if a.dtype != b.dtype or a.shape != b.shape or (bits and a.tobytes() != b.tobytes()):
            return f"{path}: a numpy {a.dtype} {a.shape} came back as {b.dtype} {b.shape}, or other bits"
        return None
    if isinstance(saved, float):
        return None if saved.hex() == loaded.hex() else f"{path}: {saved!r} came back as {loaded!r}"
    return None if saved == loaded else f"{path}: {saved!r:.60} came back as {loaded!r:.60}"


def _type_name(value: Any) -> str:
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _hint(path: str) -> str:
    """Whose state the path is in, from its first keys (Lightning's checkpoint layout)."""
    keys = [quoted or bare for quoted, bare in _KEY.findall(path)]
    first = keys[0] if keys else ""
    if first == "callbacks":
        # Lightning keys a callback's state by its class name and settings: "ModelCheckpoint{...}".
        if len(keys) < 2:
            return " (a callback's state_dict())"
        name = keys[1].strip('"').split("{")[0]
        return f" ({name}.state_dict())"
    if first in ("hyper_parameters", "datamodule_hyper_parameters"):
        return " (save_hyperparameters())"
    if first == "state_dict":
        return " (the module's state_dict(): get_extra_state())"
    if first[:1].isupper():
        return f" ({first}.state_dict())"
    return " (added in on_save_checkpoint)" if first else ""


_KEY = re.compile(r"\['((?:[^'\\]|\\.)*)'\]|\[([^\]]*)\]")
