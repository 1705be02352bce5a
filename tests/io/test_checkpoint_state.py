"""State people keep in a checkpoint comes back as the types it was, equal to the bit.

numpy arrays and scalars, Python scalars, strings, lists, tuples and dicts of them and tensors,
held in a datamodule's `state_dict()`, a module's `on_save_checkpoint` additions, a callback's
state or the hyper-parameters, are written by the checkpoint writer every save goes through and
read by the loader every reader goes through, which loads weights-only and allows no more than
torch allows. Anything else is refused in one line naming its key path and type, and nothing is
written.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.preprocessing import StandardScaler

from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_read import load_checkpoint_file
from trainwell.io.checkpoint_write import AtomicCheckpointIO, Rehearsal


def assert_same(saved: Any, loaded: Any, where: str = "", payloads: bool = True) -> None:
    """Same type (exactly), same structure, same bits: written here, not by the code under test.
    `payloads=False`: arrays and tensors by dtype and shape only (numpy scalars to the bit)."""
    assert type(loaded) is type(saved), f"{where}: {type(saved)} came back as {type(loaded)}"
    if isinstance(saved, np.ndarray | np.generic):
        a, b = np.asarray(saved), np.asarray(loaded)
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert a.tobytes() == b.tobytes() or not (payloads or isinstance(saved, np.generic)), where
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
}


def _write_and_read(checkpoint: dict[str, Any], path: Path) -> dict[str, Any]:
    """Saved as every checkpoint is saved, read as every reader reads it."""
    AtomicCheckpointIO().save_checkpoint(checkpoint, path)
    return load_checkpoint_file(path)


@pytest.mark.parametrize("name", list(KEPT))
def test_state_people_keep_comes_back_as_the_same_types_and_bits(name: str, tmp_path: Path) -> None:
    safe_before = list(torch.serialization.get_safe_globals())
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
    # Plain torch reads the file weights-only, and nothing was added to what unpickling may run.
    torch.load(tmp_path / "s.ckpt", weights_only=True)
    assert list(torch.serialization.get_safe_globals()) == safe_before


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
            {"running": [1, Point(1, 2)]},
            "checkpoint['running'][1] (added in on_save_checkpoint)",
            f"{__name__}.Point",
        ),
    ],
    ids=["fitted-scaler", "defaultdict", "object-array", "namedtuple"],
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
