"""State people keep in a checkpoint comes back as the types it was, equal to the bit.

numpy arrays and scalars, Python scalars, strings, lists, tuples and dicts of them and tensors,
held in a datamodule's `state_dict()`, a module's `on_save_checkpoint` additions, a callback's
state or the hyper-parameters, are written by the checkpoint writer every save goes through and
read by the loader every reader goes through, which loads weights-only with numpy's arrays and
scalars allowed (torch's own allowlist), and so does a plain torch.load under that allowlist:
numpy values are stored as numpy. Only what the allowlist cannot read is written as data (each
case named below), and checkpoints of the earlier release, which wrote numpy values as data,
keep loading. Anything else is refused in one line naming its key path and type, and nothing is
written.
"""

from __future__ import annotations

import collections
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.preprocessing import StandardScaler

from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_read import load_checkpoint_file
from trainwell.io.checkpoint_state import NUMPY_GLOBALS, TAG
from trainwell.io.checkpoint_write import AtomicCheckpointIO, Rehearsal

# Written by the release that stored numpy values as tagged data, with KEPT's first 26 values
# under "MyData" (and the float64 array under "hyper_parameters"/"mean").
TAGGED = Path(__file__).parent / "fixtures" / "tagged_state.ckpt"


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    # A long double's padding bytes (x87: 10 bytes of value in 16) are left unset when numpy
    # makes a 0-d array of a scalar: compare its value, sign and NaN-ness instead.
    if a.dtype not in (np.dtype(np.longdouble), np.dtype(np.clongdouble)):
        return a.tobytes() == b.tobytes()
    pairs = [(a.real, b.real), (a.imag, b.imag)] if a.dtype.kind == "c" else [(a, b)]
    return all(
        np.array_equal(x, y, equal_nan=True) and np.array_equal(np.signbit(x), np.signbit(y))
        for x, y in pairs
    )


def assert_same(saved: Any, loaded: Any, where: str = "", payloads: bool = True) -> None:
    """Same type (exactly), same structure, same bits: written here, not by the code under test.
    `payloads=False`: tensors by dtype and shape only, arrays of more than one element by dtype
    and number of dimensions (they travel as one element of their dtype), numpy scalars to the
    bit."""
    assert type(loaded) is type(saved), f"{where}: {type(saved)} came back as {type(loaded)}"
    if isinstance(saved, np.ndarray | np.generic):
        a, b = np.asarray(saved), np.asarray(loaded)
        shrunk = not payloads and a.size > 1 and a.dtype.isnative and isinstance(saved, np.ndarray)
        shape = (1,) * a.ndim if shrunk else a.shape
        assert (a.dtype, shape) == (b.dtype, b.shape), where
        assert _same_bits(a, b) or not (payloads or isinstance(saved, np.generic)), where
    elif isinstance(saved, torch.Tensor):
        assert (saved.dtype, saved.shape) == (loaded.dtype, loaded.shape), where
        assert torch.equal(saved, loaded) or not payloads, where
    elif isinstance(saved, dict):
        assert list(saved) == list(loaded), where
        for key in saved:
            assert_same(saved[key], loaded[key], f"{where}[{key!r}]", payloads)
    elif isinstance(saved, list | tuple):
        assert len(saved) == len(loaded), where
        for i, (a, b) in enumerate(zip(saved, loaded, strict=True)):
            assert_same(a, b, f"{where}[{i}]", payloads)
    elif isinstance(saved, float):
        assert saved.hex() == loaded.hex(), where
    else:
        assert saved == loaded, where


KEPT = {
    "float64 with NaN and -0.0": np.array([1.5, np.nan, -0.0, np.inf]),
    "float32 2-D, strided": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
    "float16": np.linspace(0, 1, 5, dtype=np.float16),
    "int64": np.arange(5, dtype=np.int64),
    "uint16": np.arange(4, dtype=np.uint16),
    "bool": np.array([True, False]),
    "complex128": np.array([1 + 2j]),
    "big-endian int32": np.array([1, 2], dtype=">i4"),
    "unicode strings": np.array(["setosa", "virginica"]),
    "datetime64": np.array(["2024-01-01"], dtype="datetime64[D]"),
    "structured": np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8", (2,))]),
    "0-d": np.array(3.25),
    "empty": np.zeros((0, 13)),
    "np.float64": np.float64(0.1),
    "np.float32": np.float32(0.1),
    "np.int64": np.int64(-7),
    "np.bool_": np.bool_(True),
    "np.str_": np.str_("train"),
    "python scalars": [1, 2.5, True, None, "x", b"raw", 1 + 2j],
    "tuple": ("train", 142, np.float64(0.5)),
    "nested": {"a": [np.arange(2), {"b": (np.int8(1),)}], "c": collections.OrderedDict(d=1)},
    "np.unique counts": dict(zip(*np.unique([0, 1, 1, 2, 2, 2], return_counts=True), strict=True)),
    "a user's dict holding the tag key": {"__trainwell_state__": "mine", "x": 1},
    "set": {1, 2, 3},
    "frozenset": frozenset({np.int64(4), 5}),
    "tensor": torch.arange(3.0),
    "set of numpy scalars and tuples": {np.int64(1), np.float32(2), ("a", np.int8(3))},
    "numpy scalars of every kind": [
        # (long double scalars aside: their padding bytes are whatever memory held; the
        # dtype test below reads them from set bytes)
        np.uint64(2**64 - 1), np.float16(-0.0),
        np.bytes_(b"x"), np.datetime64("2024-01-01T12"), np.timedelta64(3, "s"),
        np.void(b"ab"),
    ],
    "arrays of every other dtype": [
        np.arange(3, dtype=np.int8), np.arange(3, dtype=np.uint64), np.zeros(2, np.longdouble),
        np.zeros(2, np.clongdouble), np.array([b"ab"]), np.array([1], dtype="m8[s]"),
        np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    ],
    "bytearray and torch values": [bytearray(b"ab"), torch.Size([2, 3]), torch.int8],
    "a dict keyed by a frozenset": {frozenset({1, 2}): "pair", ("t", frozenset({3})): 1},
    "a set holding a frozenset": {frozenset({1}), 2},
    "empty string scalar": np.str_(""),
}  # fmt: skip
# What torch's weights-only load cannot read even with numpy allowed, and so is written as data:
# a frozenset (no frozenset at all), a set or dict key holding one; numpy values with no data
# (pickled as a call of bytes()) or a byte order not the machine's (read back as the machine's);
# a user's dict holding the tag key (it would read back as a tagged value).
ENCODED = {
    "frozenset",
    "a dict keyed by a frozenset",
    "a set holding a frozenset",
    "empty",
    "empty string scalar",
    "big-endian int32",
    "a user's dict holding the tag key",
}


def _write_and_read(checkpoint: dict[str, Any], path: Path) -> dict[str, Any]:
    """Saved as every checkpoint is saved, read as every reader reads it."""
    AtomicCheckpointIO().save_checkpoint(checkpoint, path)
    return load_checkpoint_file(path)


@pytest.mark.parametrize("name", list(KEPT))
def test_state_people_keep_comes_back_as_the_same_types_and_bits(name: str, tmp_path: Path) -> None:
    safe_before = set(torch.serialization.get_safe_globals())
    value = KEPT[name]
    # A datamodule's state (under its class name), a callback's state, the hparams, and a key a
    # module adds in on_save_checkpoint.
    kept = {
        "MyData": {"kept": value},
        "callbacks": {"MyCallback": {"kept": value}},
        "hyper_parameters": {"kept": value},
        "my_extra": {"kept": value},
    }
    loaded = _write_and_read({"state_dict": {"w": torch.ones(2)}, **kept}, tmp_path / "s.ckpt")
    for where, holder in kept.items():
        assert_same(holder, loaded[where], where)
    # Nothing was added to what unpickling may run, once trainwell's load is done.
    assert set(torch.serialization.get_safe_globals()) == safe_before
    # A plain torch load under numpy's allowlist sees the values themselves, not an encoding
    # (but for what the allowlist cannot read).
    with torch.serialization.safe_globals(NUMPY_GLOBALS):
        raw = torch.load(tmp_path / "s.ckpt", weights_only=True)
    for where, holder in kept.items():
        if name in ENCODED:
            assert TAG in str(raw[where]), where
        else:
            assert_same(holder, raw[where], where)


@pytest.mark.parametrize("name", sorted(ENCODED))
def test_only_what_the_numpy_allowlist_cannot_read_is_written_as_data(
    name: str, tmp_path: Path
) -> None:
    """Saved as it is, the value is refused by a weights-only load with numpy allowed, or comes
    back as another value: that is why it is written as data."""
    value = KEPT[name]
    if name == "a user's dict holding the tag key":
        value = {TAG: "set", "items": [1, 2]}  # a dict of the same shape, not a set
    torch.save({"state_dict": {}, "kept": value}, tmp_path / "as_is.ckpt")
    try:
        with torch.serialization.safe_globals(NUMPY_GLOBALS):
            torch.load(tmp_path / "as_is.ckpt", weights_only=True)
        back = load_checkpoint_file(tmp_path / "as_is.ckpt")["kept"]
    except Exception as err:
        assert re.search(r"GLOBAL (frozenset|bytes)", str(err)), err
    else:
        with pytest.raises(AssertionError):
            assert_same(value, back)


def test_a_checkpoint_of_the_release_that_wrote_numpy_as_data_keeps_loading() -> None:
    with torch.serialization.safe_globals([]):  # its numpy values are tensors and tags
        raw = torch.load(TAGGED, weights_only=True)
    assert raw["MyData"]["int64"][TAG] == "numpy.ndarray"
    loaded = load_checkpoint_file(TAGGED)
    names = list(KEPT)[:26]
    assert list(loaded["MyData"]) == names
    for name in names:
        assert_same(KEPT[name], loaded["MyData"][name], name)
    assert_same(KEPT["float64 with NaN and -0.0"], loaded["hyper_parameters"]["mean"])


DTYPE_CODES = "?bhilBHILefdgFDGSUVMm"


@pytest.mark.parametrize("code", list(DTYPE_CODES))
def test_the_allowlist_is_what_numpy_arrays_and_scalars_need(code: str, tmp_path: Path) -> None:
    """With the installed torch and numpy: an array and a scalar of each data dtype load under
    NUMPY_GLOBALS; without numpy's rebuild functions, or the dtype's class, they are refused."""
    dtype = {"M": "M8[s]", "m": "m8[s]", "V": "V2"}.get(code, code)
    array = np.frombuffer(b"\x01\x02" * 16, dtype=np.uint8)[: 2 * np.dtype(dtype).itemsize]
    array = array.view(dtype) if code not in "SU" else np.array(["ab", "c"], dtype=code)
    torch.save({"a": array, "s": array[0]}, tmp_path / "a.pt")
    with torch.serialization.safe_globals(NUMPY_GLOBALS):
        back = torch.load(tmp_path / "a.pt", weights_only=True)
    assert_same({"a": array, "s": array[0]}, back)
    rebuilds = [g for g in NUMPY_GLOBALS if isinstance(g, tuple)]
    for missing in (rebuilds, [type(array.dtype)]):
        fewer = [g for g in NUMPY_GLOBALS if g not in missing]
        with torch.serialization.safe_globals(fewer), pytest.raises(Exception, match="global"):
            torch.load(tmp_path / "a.pt", weights_only=True)


def test_every_kind_at_once_and_nothing_changed_in_place(tmp_path: Path) -> None:
    state = {k.replace(" ", "_"): v for k, v in KEPT.items()}
    weights = collections.OrderedDict(w=torch.ones(2))
    weights._metadata = {"": {"version": 2}}  # type: ignore[attr-defined]
    checkpoint = {"state_dict": weights, "MyData": state}
    loaded = _write_and_read(checkpoint, tmp_path / "all.ckpt")
    assert_same(state, loaded["MyData"])
    assert checkpoint["MyData"] is state and type(state["float64_with_NaN_and_-0.0"]) is np.ndarray
    # The module's weights keep the _metadata its load_state_dict reads.
    assert loaded["state_dict"]._metadata == {"": {"version": 2}}


def test_a_background_save_writes_the_numpy_state_of_its_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread writes after the next steps have begun: a datamodule that updates its
    arrays in place then must not change what the earlier save holds."""
    writer, release = AtomicCheckpointIO(background=True), threading.Event()
    write = writer._write
    monkeypatch.setattr(writer, "_write", lambda c, f: (release.wait(10), write(c, f)))
    counts, seen = np.zeros(3), bytearray(b"ab")
    writer.save_checkpoint(
        {"state_dict": {}, "MyData": {"counts": counts, "seen": seen}}, tmp_path / "a.ckpt"
    )
    counts += 1  # the next steps, in place
    seen[0] = 0
    release.set()
    writer.teardown()
    loaded = load_checkpoint_file(tmp_path / "a.ckpt")["MyData"]
    assert_same({"counts": np.zeros(3), "seen": bytearray(b"ab")}, loaded)


Point = collections.namedtuple("Point", "x y")


@pytest.mark.parametrize(
    ("checkpoint", "path", "kind"),
    [
        (
            {"WineData": {"scaler": StandardScaler()}},
            "checkpoint['WineData']['scaler'] (WineData.state_dict())",
            "sklearn.preprocessing._data.StandardScaler",
        ),
        (
            {"callbacks": {"Counter{'every': 2}": {"seen": collections.defaultdict(int)}}},
            "checkpoint['callbacks'][\"Counter{'every': 2}\"]['seen'] (Counter.state_dict())",
            "collections.defaultdict",
        ),
        (
            {"hyper_parameters": {"classes": np.array(["a", None], dtype=object)}},
            "checkpoint['hyper_parameters']['classes'] (save_hyperparameters())",
            "numpy.ndarray of dtype object",
        ),
        (
            {"MyData": {"names": np.array(["a", "bc"], dtype=np.dtypes.StringDType())}},
            "checkpoint['MyData']['names'] (MyData.state_dict())",
            "numpy.ndarray of dtype StringDType()",
        ),
        (
            {"running": [1, Point(1, 2)]},
            "checkpoint['running'][1] (added in on_save_checkpoint)",
            f"{__name__}.Point",
        ),
    ],
    ids=["fitted-scaler", "defaultdict", "object-array", "string-dtype-array", "namedtuple"],
)
def test_a_value_no_checkpoint_can_hold_is_refused_in_one_line_naming_its_key_and_type(
    checkpoint: dict[str, Any], path: str, kind: str, tmp_path: Path
) -> None:
    target = tmp_path / "refused.ckpt"
    with pytest.raises(TrainwellError) as caught:
        AtomicCheckpointIO().save_checkpoint({"state_dict": {}, **checkpoint}, target)
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"{path} is a {kind}"), line
    assert "weights-only" in line
    assert not target.exists() and not list(tmp_path.iterdir())  # nothing written


def test_the_refusal_suggests_keeping_the_fitted_arrays_and_that_is_saved(tmp_path: Path) -> None:
    """The refusal's fix ("a fitted object's arrays, such as a scaler's mean_ and scale_, not
    the object"), applied to the case it names: the arrays come back and rebuild the scaler."""
    x = np.random.default_rng(0).normal(size=(50, 13))
    scaler = StandardScaler().fit(x)
    with pytest.raises(
        TrainwellError, match=re.escape("a scaler's mean_ and scale_, not the object")
    ):
        AtomicCheckpointIO().save_checkpoint(
            {"state_dict": {}, "WineData": {"scaler": scaler}}, tmp_path / "a.ckpt"
        )
    kept = {"mean": scaler.mean_, "scale": scaler.scale_, "seen": scaler.n_samples_seen_}
    loaded = _write_and_read({"state_dict": {}, "WineData": kept}, tmp_path / "b.ckpt")
    rebuilt = StandardScaler()
    rebuilt.mean_, rebuilt.scale_ = loaded["WineData"]["mean"], loaded["WineData"]["scale"]
    rebuilt.n_features_in_ = 13
    assert rebuilt.transform(x).tobytes() == scaler.transform(x).tobytes()


def _rehearsed(checkpoint: dict[str, Any], payloads: bool) -> Rehearsal:
    rehearsal = Rehearsal(payloads=payloads)
    rehearsal.run(AtomicCheckpointIO(), checkpoint)
    return rehearsal


def test_the_step0_rehearsal_carries_structure_types_and_numpy_metadata_not_payloads() -> None:
    """Without payloads every kind above comes back with its type, structure, dtype and shape
    (numpy scalars to the bit), and the bytes written are those of the non-tensor state: a
    4 MB tensor and an 8 MB array add nothing."""
    state = {k.replace(" ", "_"): v for k, v in KEPT.items()}
    big = {"w": torch.ones(1000, 1000), "mean": np.random.default_rng(0).random((1000, 1000))}
    checkpoint = {"state_dict": {"w": big["w"]}, "MyData": {**state, "mean": big["mean"]}}
    full, light = _rehearsed(checkpoint, True), _rehearsed(checkpoint, False)
    assert full.error is None and light.error is None, light.error
    assert full.bytes > 12_000_000
    assert light.bytes < 64_000  # the same checkpoint, tensors as stand-ins
    assert_same(checkpoint, light.loaded, payloads=False)
    assert light.loaded["MyData"]["np.float64"] == np.float64(0.1)


def test_the_step0_rehearsal_without_payloads_refuses_what_the_full_one_refuses() -> None:
    for refused in ({"scaler": StandardScaler()}, {"p": [1, Point(1, 2)]}):
        light = _rehearsed({"state_dict": {"w": torch.ones(3)}, "MyData": refused}, False)
        full = _rehearsed({"state_dict": {"w": torch.ones(3)}, "MyData": refused}, True)
        assert light.error is not None and str(light.error) == str(full.error)
