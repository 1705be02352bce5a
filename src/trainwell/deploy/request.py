"""Checking a /predict request body against the manifest's `input` spec, before any model sees it.

`parse_inputs(body, spec)` returns a float array of shape (batch, *sample shape) or raises
BadRequest with one line saying what is wrong: malformed JSON, no `inputs`, an empty list, the
wrong shape, the wrong dtype (strings, booleans, nulls), NaN/inf or a value outside `range`, or a
body over the size limit. The server answers a BadRequest with a 4xx status and that line.
"""

from __future__ import annotations

import json
import math
from itertools import chain
from typing import Any

import numpy as np


class BadRequest(ValueError):
    """A request the server refuses with a 4xx status and a one-line message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _check_numbers(value: Any, where: str, depth: int) -> None:
    """Every leaf a number, lists nested at most `depth` deep (a batch of samples): deeper nesting
    is refused here, never left to a recursion limit."""
    if isinstance(value, list):
        if depth == 0:
            raise BadRequest(f"{where} is a list nested deeper than the input's shape allows")
        for i, item in enumerate(value):
            _check_numbers(item, f"{where}[{i}]", depth - 1)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{where} is {type(value).__name__}, expected a number")


def _plainly_numbers(inputs: list, depth: int) -> bool:
    """True when every leaf of `inputs` is an int or float and every list lies at most `depth`
    deep, checked one nesting level at a time with C-level passes (`map(type, ...)`, `chain`)
    instead of a Python call per element. False means "not sure": `_check_numbers` then walks the
    body and names the first bad element, so a refusal reads the same either way."""
    level: list = inputs
    for _ in range(depth):
        kinds = set(map(type, level))
        if kinds <= {int, float}:  # bool is its own type here: True is refused, not taken as 1
            return True
        if kinds != {list}:  # strings, nulls, booleans or lists beside numbers
            return False
        level = list(chain.from_iterable(level))
    return False  # lists nested deeper than `depth`


def parse_inputs(body: bytes | str, spec: dict[str, Any], max_bytes: int = 1 << 20) -> np.ndarray:
    """The batch in `body` as an array of spec['dtype'], checked against `spec` (manifest input)."""
    if len(body) > max_bytes:
        raise BadRequest(f"request body is {len(body)} bytes, over the limit of {max_bytes}", 413)
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise BadRequest(f"body is not valid JSON: {err}") from None
    except RecursionError:  # JSON nested ~1000 deep: no batch of samples is
        raise BadRequest("body is nested too deep for a batch of samples") from None
    if not isinstance(payload, dict) or "inputs" not in payload:
        raise BadRequest('body must be a JSON object with "inputs": [<sample>, ...]')
    inputs = payload["inputs"]
    if not isinstance(inputs, list):
        raise BadRequest('"inputs" must be a list of samples')
    if not inputs:
        raise BadRequest('"inputs" is an empty list; send at least one sample')
    if not _plainly_numbers(inputs, len(spec["shape"])):
        _check_numbers(inputs, "inputs", len(spec["shape"]))
    sample_shape = tuple(spec["shape"][1:])
    try:
        array = np.asarray(inputs, dtype=np.float64)
    except ValueError:
        raise BadRequest(f"samples are ragged; each must have shape {list(sample_shape)}") from None
    # None in the spec is a dynamic axis (a token model's sequence length): any size fits.
    got_shape = array.shape[1:]
    if len(got_shape) != len(sample_shape) or any(
        want is not None and want != got for want, got in zip(sample_shape, got_shape, strict=True)
    ):
        raise BadRequest(
            f"each sample must have shape {list(sample_shape)}, got {list(array.shape[1:])}"
        )
    longest = spec.get("max_sequence")
    if longest is not None and array.ndim > 1 and array.shape[1] > int(longest):
        raise BadRequest(f"sequences are {array.shape[1]} long, over the limit of {longest}")
    if not np.isfinite(array).all():
        raise BadRequest("inputs contain NaN or infinity")
    low, high = spec.get("range") or (-math.inf, math.inf)
    if array.min() < low or array.max() > high:
        raise BadRequest(
            f"inputs must lie in [{low}, {high}], got values in [{array.min()}, {array.max()}]"
        )
    dtype = np.dtype(spec["dtype"])
    # A uint8 image sent as 3.7 would otherwise be truncated to 3 without a word.
    if np.issubdtype(dtype, np.integer) and not (array == np.floor(array)).all():
        raise BadRequest(f"inputs must be whole numbers (the model takes {dtype.name})")
    with np.errstate(over="ignore"):  # checked just below
        cast = array.astype(dtype)
    # 1e39 is finite in float64 and infinite in float32: the model would see infinity.
    if np.issubdtype(dtype, np.floating) and not np.isfinite(cast).all():
        raise BadRequest(f"inputs overflow {dtype.name} (|value| up to {np.abs(array).max():g})")
    return cast
