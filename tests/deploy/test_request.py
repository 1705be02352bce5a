"""Reading a /predict body: every malformed JSON or .npy body is one 4xx line, a body over the limit
is stopped once, and a good body becomes the exact array, integers kept apart from floats."""

import asyncio
import io
import json

import numpy as np
import pytest

from trainwell.deploy.input_spec import InputRefused, InputSpec
from trainwell.deploy.request import (
    NPY,
    BadRequest,
    json_samples,
    not_as_declared,
    npy_samples,
    read_body,
)

pytestmark = pytest.mark.engine  # needs nothing of the examples

SPEC = InputSpec.from_dict(
    {"dtype": "float32", "shape": [None, 8, 8], "range": [0.0, 16.0]}, "the test's spec"
)
GOOD = [[[float((r * 8 + c) % 17) for c in range(8)] for r in range(8)]]


def parsed(body: str | bytes, spec: InputSpec = SPEC) -> np.ndarray:
    """What the server does with a JSON body: read it, then check it against the spec."""
    return spec.check(json_samples(body, spec.ndim))


def test_good_request_parses_to_the_exact_array():
    array = parsed(json.dumps({"inputs": GOOD * 3}))
    assert array.dtype == np.float32 and array.shape == (3, 8, 8)
    np.testing.assert_array_equal(array[1], np.asarray(GOOD[0], dtype=np.float32))


def _nan_body():
    bad = json.loads(json.dumps(GOOD))
    bad[0][0][0] = float("nan")
    return json.dumps({"inputs": bad})


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"x": GOOD}), '"inputs"'),
        (json.dumps({"inputs": []}), "empty"),
        (json.dumps({"inputs": [[[1.0] * 7] * 8]}), "shape"),
        (json.dumps({"inputs": [[[1.0] * 8] * 8, [[1.0] * 8] * 7]}), "ragged"),
        (json.dumps({"inputs": [[["a"] * 8] * 8]}), "expected a number"),
        (json.dumps({"inputs": [[[True] * 8] * 8]}), "expected a number"),
        (json.dumps({"inputs": [[[None] * 8] * 8]}), "expected a number"),
        (_nan_body(), "NaN"),
        (json.dumps({"inputs": [[[17.0] * 8] * 8]}), "[0.0, 16.0]"),
        (json.dumps({"inputs": [[[-1.0] * 8] * 8]}), "[0.0, 16.0]"),
        (json.dumps({"inputs": [[[2**70] * 8] * 8]}), "64 bits"),
    ],
)
def test_bad_request_is_one_4xx_line(body, words):
    with pytest.raises((BadRequest, InputRefused)) as err:
        parsed(body)
    if isinstance(err.value, BadRequest):
        assert 400 <= err.value.status < 500
    assert words in str(err.value) and "\n" not in str(err.value)


def test_an_integer_input_takes_integers_exactly_and_refuses_floats():
    spec = InputSpec.from_dict({"dtype": "uint8", "shape": [None, 2, 3], "range": [0, 255]}, "t")
    good = parsed(json.dumps({"inputs": [[[0, 1, 2], [253, 254, 255]]]}), spec)
    assert good.dtype == np.uint8 and good[0, 1].tolist() == [253, 254, 255]
    for value in (4.5, 4.0):  # 4.0 too: JSON tells 4 from 4.0, as a .npy's dtype does
        with pytest.raises(InputRefused, match="floating-point"):
            parsed(json.dumps({"inputs": [[[0, 1, 2], [3, value, 5]]]}), spec)


def test_a_dynamic_axis_takes_any_length_up_to_the_limit():
    spec = InputSpec.from_dict(
        {
            "dtype": "int64",
            "shape": [None, None],
            "dynamic_axes": {"0": "batch", "1": "sequence"},
            "range": [0, 99],
            "max_sequence": 6,
        },
        "t",
    )
    assert parsed(json.dumps({"inputs": [[1, 5, 7]]}), spec).shape == (1, 3)
    assert parsed(json.dumps({"inputs": [[1, 5, 7, 9, 2, 0]]}), spec).shape == (1, 6)
    for body, words in [([[1] * 7], "limit of 6"), ([[[1, 2]]], "nested"), ([1, 2], "shape")]:
        with pytest.raises((BadRequest, InputRefused), match=words):
            parsed(json.dumps({"inputs": body}), spec)


@pytest.mark.parametrize("depth", [5, 60, 5000])
def test_deep_nesting_is_one_4xx_line_never_a_recursion_error(depth):
    body = '{"inputs": ' + "[" * depth + "1.0" + "]" * depth + "}"
    with pytest.raises(BadRequest) as err:
        parsed(body)
    assert err.value.status == 400 and "\n" not in str(err.value)
    assert "nested" in str(err.value)


def test_a_well_formed_body_is_checked_without_walking_every_element(monkeypatch):
    # The element-by-element walk costs ~1.4 ms on a 32x32x3 image (most of a request's parse);
    # a well-formed body is checked level by level instead, and only a body that fails that
    # check is walked, to name its first bad element.
    import trainwell.deploy.request as request

    def walk(*args):
        raise AssertionError("a well-formed body was walked element by element")

    monkeypatch.setattr(request, "_check_numbers", walk)
    spec = InputSpec.from_dict({"dtype": "uint8", "shape": [None, 4, 4, 3], "range": [0, 255]}, "t")
    image = np.arange(48, dtype=np.uint8).reshape(1, 4, 4, 3)
    array = parsed(json.dumps({"inputs": image.tolist()}), spec)
    np.testing.assert_array_equal(array, image)
    assert parsed(json.dumps({"inputs": GOOD * 2})).shape == (2, 8, 8)


def test_integers_and_floats_stay_apart_on_both_walks():
    body = json.dumps({"inputs": [[1, 2], [3, 4]]})
    assert json_samples(body, 2).dtype == np.int64
    assert json_samples(json.dumps({"inputs": [[1, 2], [3, 4.0]]}), 2).dtype == np.float64
    # A body the level-by-level check is unsure of (lists beside numbers, then fixed) is walked:
    # the walk tells floats apart too.
    import trainwell.deploy.request as request

    assert request._check_numbers([[1, 2], [3, 4.0]], "inputs", 2) is True
    assert request._check_numbers([[1, 2], [3, 4]], "inputs", 2) is False


def test_a_npy_body_is_read_without_pickle():
    buffer = io.BytesIO()
    np.save(buffer, np.arange(6, dtype=np.uint8).reshape(1, 2, 3))
    assert npy_samples(buffer.getvalue()).tolist() == [[[0, 1, 2], [3, 4, 5]]]
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for body in (pickled.getvalue(), b"not an array", b""):
        with pytest.raises(BadRequest) as err:
            npy_samples(body)
        assert err.value.status == 400 and "\n" not in str(err.value)


def test_a_npy_header_past_the_limit_is_413_before_numpy_reads_the_array(monkeypatch):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**9, 8, 8)}
    )
    # np.load would allocate the declared array first: it must never be called for this body.
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("np.load reached"))
    with pytest.raises(BadRequest) as err:
        npy_samples(header.getvalue() + b"\0" * 64, max_bytes=1 << 20)
    assert err.value.status == 413 and "[1000000000, 8, 8]" in str(err.value)


def test_a_npy_body_shorter_or_longer_than_its_header_says_is_refused():
    buffer = io.BytesIO()
    np.save(buffer, np.ones((2, 3), dtype=np.float32))
    for body in (buffer.getvalue()[:-1], buffer.getvalue() + b"\0"):
        with pytest.raises(BadRequest) as err:
            npy_samples(body, max_bytes=1 << 20)
        assert err.value.status == 400 and "declares shape [2, 3]" in str(err.value)


@pytest.mark.parametrize(
    ("body", "media_type", "expected", "found"),
    [
        (b"PK\x03\x04rest", NPY, "a .npy array", "a .npz archive"),
        (b'  {"inputs": []}', NPY, "a .npy array", "JSON"),
        (b"\x93NUMPYrest", "application/json", "JSON", "a .npy array"),
        (b"\x93NUMPYrest", "", "JSON", "a .npy array"),
    ],
)
def test_a_body_of_another_kind_than_its_content_type_names_both(body, media_type, expected, found):
    err = not_as_declared(body, media_type, expected)
    assert err is not None and err.status == 400
    assert f"body is {found}, but Content-Type says {media_type or 'no content type'}" in str(err)


def test_a_body_of_its_declared_kind_or_unrecognised_goes_to_its_reader():
    assert not_as_declared(b'{"inputs": []}', "application/json", "JSON") is None
    assert not_as_declared(b"inputs=1", "application/x-www-form-urlencoded", "JSON") is None
    assert not_as_declared(b"\x93NUMPY", NPY, "a .npy array") is None


def _receive(chunks: list[bytes]):
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]

    async def receive() -> dict:
        return messages.pop(0)

    return receive


def test_the_body_limit_is_the_readers_declared_or_not():
    read = asyncio.run(read_body({}, _receive([b"x" * 100, b"y" * 100]), 200))
    assert read == b"x" * 100 + b"y" * 100
    declared = {b"content-length": b"201"}
    for headers, chunks in [(declared, [b"x"]), ({}, [b"x" * 100, b"y" * 101])]:
        with pytest.raises(BadRequest) as err:
            asyncio.run(read_body(headers, _receive(chunks), 200))
        assert err.value.status == 413 and "limit of 200" in str(err.value)
