"""State people keep, saved as it is and read back as what it was, under torch's weights-only load.

A checkpoint holds more than weights: the datamodule's `state_dict()` (statistics fitted on the
training split: `scaler.mean_`, an `np.float64` std), what a module adds in `on_save_checkpoint`,
callbacks' states, hyper-parameters. torch pickles a numpy array or scalar as a call into numpy,
which a weights-only load (the only kind trainwell does) refuses unless numpy's few rebuilding
functions and dtype classes are allowed: `NUMPY_GLOBALS`, the allowlist torch itself recommends,
which rebuilds arrays and scalars of data dtypes and runs no other code. Every trainwell read is
made inside `numpy_allowed()`, and so can a plain torch or Lightning load
(`with torch.serialization.safe_globals(NUMPY_GLOBALS): torch.load(path, weights_only=True)`):
a datamodule's `load_state_dict` gets back its arrays, not an encoding of them.

What the allowlist cannot read is written as data, `{TAG: kind, ...}`, and every reader turns it
back into the value (io/checkpoint_read.py):
* a frozenset (weights-only loads no frozenset) -> `{TAG: "frozenset", "items": [...]}`, and a
  set holding one -> `{TAG: "set", ...}`;
* a dict keyed by such a value, or a user's dict that holds TAG itself (it would read back as a
  tagged value) -> `{TAG: "dict", "items": [[key, value], ...]}`;
* a numpy array or scalar with no data (an empty array, `np.str_("")`: numpy pickles its data
  as a call of `bytes()`, which the allowlist refuses) or in a byte order not the machine's
  (`>i4`: it would come back in the machine's) -> `{TAG: "numpy.ndarray" | "numpy.scalar",
  "dtype": ..., "shape": [...], "data": <tensor>}`, back as the same dtype, shape and bits.
Checkpoints of the earlier release hold every numpy value in that last form; they read back as
the arrays and scalars they were.

`PLAIN_LEAVES` (tensors aside) and `plain_member` are the one definition of the plain values a
checkpoint holds as they are, for the state (here), the hyper-parameters (io/hparams.py) and the
background writer's snapshot (io/checkpoint_write.py). Anything else (a fitted scikit-learn
object, a dataclass, a namedtuple, a defaultdict, an array of Python objects) cannot be saved
without pickling code: `encode_state` raises `UnsavableStateError`, one line naming the key path
and the type. Every write encodes (io/hparams.py `plain_checkpoint`), every read decodes
(io/checkpoint_read.py `load_checkpoint_file`), and a run writes and reads its first checkpoint
before its first training step (callbacks/checkpoint_rehearsal.py), so a type that cannot be
saved stops the run there.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from trainwell import compat
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
# subclass and np.str_ a str subclass, both numpy values; an IntEnum is an int subclass whose
# class would be pickled). All but bytearray are immutable and hashable.
PLAIN_LEAVES = frozenset(
    {
        str, bytes, bytearray, int, float, bool, complex, type(None),
        torch.dtype, torch.device, torch.Size,
    }
)  # fmt: skip
_HASHABLE_LEAVES = PLAIN_LEAVES - {bytearray}
# The dtype classes numpy's pickles name (through `BUILD`): every data dtype; not object arrays
# (they pickle Python objects) nor StringDType (it pickles through a private numpy function).
# (64-bit integers read back as int64 / uint64, whichever of long or long long they were.)
_DTYPE_CLASSES = frozenset(type(np.dtype(code)) for code in "?bhilBHILefdgFDGSUVMm")
# numpy kinds whose arrays torch.from_numpy reads as a tensor of the same dtype.
_TENSOR_KINDS = frozenset("biufc")
NUMPY_GLOBALS: list[Any] = [
    *compat.NUMPY_REBUILDS,
    np.ndarray,
    np.dtype,
    *sorted(_DTYPE_CLASSES, key=str),
]
_ALLOWING = threading.Lock()
_allowed_depth = 0
_allowed: Any = None


@contextmanager
def numpy_allowed() -> Iterator[None]:
    """Inside: weights-only loads also rebuild numpy arrays and scalars (`NUMPY_GLOBALS`).

    The one context every trainwell load of a checkpoint runs in (io/checkpoint_read.py, the
    sharded strategy's loads in training/fsdp.py). Adds only what is not allowed already and
    takes away only what it added, once the outermost of nested or concurrent uses ends."""
    global _allowed_depth, _allowed
    with _ALLOWING:
        if _allowed_depth == 0:
            present = set(torch.serialization.get_safe_globals())
            _allowed = torch.serialization.safe_globals(
                [g for g in NUMPY_GLOBALS if g not in present]
            )
            _allowed.__enter__()
        _allowed_depth += 1
    try:
        yield
    finally:
        with _ALLOWING:
            _allowed_depth -= 1
            if _allowed_depth == 0:
                _allowed.__exit__(None, None, None)
                _allowed = None


def plain_member(value: Any) -> bool:
    """`value` may be a member of a saved set or a key of a saved dict: a hashable plain leaf, a
    numpy scalar of a data dtype, or a tuple or frozenset of such (the one rule for sets, of the
    state and of the hyper-parameters)."""
    kind = type(value)
    if kind is tuple or kind is frozenset:
        return all(plain_member(v) for v in value)
    return kind in _HASHABLE_LEAVES or _numpy_scalar(value)


def _numpy_scalar(value: Any) -> bool:
    return isinstance(value, np.generic) and type(value.dtype) in _DTYPE_CLASSES


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
    if kind in PLAIN_LEAVES or isinstance(value, torch.Tensor):
        return value
    if kind is dict or kind is OrderedDict:
        if TAG in value or not all(_written_as_is(k) for k in value):
            return {TAG: _DICT, "ordered": kind is OrderedDict, "items": _encode_items(value)}
        return _copy_changed(value)
    if kind is list or kind is tuple:
        items = [_at(i, v) for i, v in enumerate(value)]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if kind is list else tuple(items)
    if kind is set or kind is frozenset:
        items = [_encode(v) for v in value]
        if kind is set and all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return {TAG: _SET if kind is set else _FROZENSET, "items": items}
    if kind is np.ndarray or isinstance(value, np.generic):
        if type(value.dtype) not in _DTYPE_CLASSES or value.dtype.hasobject:
            raise _Refused(value, f" of dtype {value.dtype}")
        if value.dtype.isnative and value.nbytes:
            return value  # numpy_allowed() reads it as it is
        # Not so: no data (pickled as a call of bytes(), which the allowlist refuses), or a
        # byte order not the machine's (it would come back in the machine's).
        return {TAG: _NDARRAY if kind is np.ndarray else _SCALAR, **_array(np.asarray(value))}
    raise _Refused(value)


def _written_as_is(key: Any) -> bool:
    """A dict key weights-only loads read as it is (not one holding a frozenset or an object)."""
    return type(key) in _HASHABLE_LEAVES or (plain_member(key) and _encode(key) is key)


def _at(key: Any, value: Any) -> Any:
    try:
        return _encode(value)
    except _Refused as refused:
        refused.keys.append(f"[{key!r}]")
        raise


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
        if a.dtype != b.dtype or a.shape != b.shape or (bits and not same_bits(a, b)):
            return f"{path}: a numpy {a.dtype} {a.shape} came back as {b.dtype} {b.shape}, or other bits"
        return None
    if isinstance(saved, float):
        return None if saved.hex() == loaded.hex() else f"{path}: {saved!r} came back as {loaded!r}"
    return None if saved == loaded else f"{path}: {saved!r:.60} came back as {loaded!r:.60}"


# x87 extended precision: 10 bytes of value stored in 12 or 16, and numpy leaves the rest unset
# when it makes a 0-d array of a scalar, so those bytes differ between two copies of one value.
_PADDED = frozenset({np.dtype(np.longdouble), np.dtype(np.clongdouble)})


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """`a` and `b` (same dtype and shape) hold the same bits: NaN equals NaN, -0.0 differs from
    0.0; a long double's padding bytes are not part of its value."""
    if a.dtype not in _PADDED:
        return a.tobytes() == b.tobytes()
    parts = (np.real, np.imag) if a.dtype.kind == "c" else (np.asarray,)
    return all(
        np.array_equal(part(a), part(b), equal_nan=True)
        and np.array_equal(np.signbit(part(a)), np.signbit(part(b)))
        for part in parts
    )


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
