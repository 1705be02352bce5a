"""A /predict request body, read and turned into an array; whether its values suit the model is
the input spec's job (deploy/input_spec.py), the same for every path that feeds the model.

- `read_body`: the body, stopped at the size limit (413): the one place the limit is checked,
  on the declared length before reading and on the bytes read for a body without one.
- `json_samples`: `{"inputs": [<sample>, ...]}` parsed, every leaf checked to be a number and
  no list nested deeper than a batch of samples; an array of int64 when every number is an
  integer, else float64, so the spec can tell 3 from 3.0.
- `npy_samples`: a `.npy` body (`Content-Type: application/x-npy`), read without pickle: its
  header is parsed first, and a declared array past the size limit is refused (413) before numpy
  allocates it (np.load would allocate the declared shape, then fail to fill it).
- `sniff`: what a body is by its first bytes (a .npy array, a .npz archive, JSON), so a body that
  is not what its content type says is answered naming both, never with a reader's advice
  meant for a file on disk (numpy's "allow_pickle").

Each raises BadRequest with one line and the status the server answers.
"""

from __future__ import annotations

import io
import json
import math
from itertools import chain
from typing import Any

import numpy as np

NPY = "application/x-npy"


class BadRequest(ValueError):
    """A request the server refuses with a 4xx status and a one-line message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


async def read_body(headers: dict[bytes, bytes], receive: Any, max_bytes: int) -> bytes:
    """The ASGI request's body, refused (413) past `max_bytes` before more of it is read."""
    declared = headers.get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BadRequest(
            f"request body is {int(declared)} bytes, over the limit of {max_bytes}", 413
        )
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest("client disconnected before the body was complete")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:  # a chunked body without a length: stop reading at the limit
            raise BadRequest(f"request body is over the limit of {max_bytes} bytes", 413)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _check_numbers(value: Any, where: str, depth: int) -> bool:
    """Every leaf a number, lists nested at most `depth` deep (a batch of samples): deeper nesting
    is refused here, never left to a recursion limit. True when some leaf is a float."""
    if isinstance(value, list):
        if depth == 0:
            raise BadRequest(f"{where} is a list nested deeper than the input's shape allows")
        return any(
            [_check_numbers(item, f"{where}[{i}]", depth - 1) for i, item in enumerate(value)]
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{where} is {type(value).__name__}, expected a number")
    return isinstance(value, float)


def _plainly_numbers(inputs: list, depth: int) -> set[type] | None:
    """The types of the leaves ({int}, {float}, {int, float}, or empty for empty lists) when every
    leaf of `inputs` is an int or float and every list lies at most `depth` deep, checked one
    nesting level at a time with C-level passes (`map(type, ...)`, `chain`) instead of a Python
    call per element. None means "not sure": `_check_numbers` then walks the body and names the
    first bad element, so a refusal reads the same either way."""
    level: list = inputs
    for _ in range(depth):
        kinds = set(map(type, level))
        if kinds <= {int, float}:  # bool is its own type here: True is refused, not taken as 1
            return kinds
        if kinds != {list}:  # strings, nulls, booleans or lists beside numbers
            return None
        level = list(chain.from_iterable(level))
    return None  # lists nested deeper than `depth`


def json_samples(body: bytes | str, depth: int) -> np.ndarray:
    """The batch in a JSON body, nested lists `depth` deep (the input's rank, batch included)."""
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
    kinds = _plainly_numbers(inputs, depth)
    floats = float in kinds if kinds is not None else _check_numbers(inputs, "inputs", depth)
    try:
        return np.asarray(inputs, dtype=np.float64 if floats else np.int64)
    except OverflowError:
        raise BadRequest("an integer in the inputs does not fit in 64 bits") from None
    except ValueError:
        raise BadRequest("samples are ragged: lists of one level differ in length") from None


NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"  # a .npz archive is a zip file


def sniff(body: bytes) -> str:
    """What `body` is by its first bytes: "a .npy array", "a .npz archive", "JSON" or ""."""
    if body.startswith(NPY_MAGIC):
        return "a .npy array"
    if body.startswith(ZIP_MAGIC):
        return "a .npz archive"
    if body.lstrip()[:1] in (b"{", b"["):
        return "JSON"
    return ""


def not_as_declared(body: bytes, media_type: str, expected: str) -> BadRequest | None:
    """The refusal of a body that is something else than its content type says (`expected`,
    "a .npy array" or "JSON"), or None. An unrecognised body is left to its reader."""
    found = sniff(body)
    if not found or found == expected:
        return None
    send = {
        "a .npy array": "send it with Content-Type: application/x-npy",
        "JSON": "send it with Content-Type: application/json",
        "a .npz archive": "send one array saved with numpy.save, with Content-Type: "
        "application/x-npy",
    }[found]
    declared = media_type or "no content type"
    return BadRequest(f"body is {found}, but Content-Type says {declared} ({expected}): {send}")


def _npy_header(stream: io.BytesIO) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) a .npy header declares, read without touching the data."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f".npy format version {version} (this server reads 1.0 and 2.0)")
    return shape, dtype


def npy_samples(body: bytes, max_bytes: int | None = None) -> np.ndarray:
    """The batch in a .npy body, read without pickle (an object array is refused). The header's
    declared size is checked against `max_bytes` (413) and against the bytes that follow it
    before any array is made."""
    stream = io.BytesIO(body)
    try:
        shape, dtype = _npy_header(stream)
    except (ValueError, OSError, EOFError) as err:
        raise BadRequest(f"body is not a readable .npy array ({err})") from None
    if dtype.hasobject:
        raise BadRequest("body is a .npy array of Python objects; send numbers")
    declared = math.prod(shape) * dtype.itemsize
    if max_bytes is not None and declared > max_bytes:
        raise BadRequest(
            f".npy header declares shape {list(shape)} of {dtype.name} ({declared} bytes), over "
            f"the limit of {max_bytes}",
            413,
        )
    present = len(body) - stream.tell()
    if present != declared:
        raise BadRequest(
            f".npy header declares shape {list(shape)} of {dtype.name} ({declared} bytes) but "
            f"the body holds {present} bytes after it"
        )
    stream.seek(0)
    try:
        return np.load(stream, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise BadRequest(f"body is not a readable .npy array ({err})") from None
