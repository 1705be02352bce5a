"""The input spec: one set of rules for every path that hands samples to a model. A JSON body, a
.npy body and a .npy file holding the same samples get the same answer, line for line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.input_cases import FORMER_DISAGREEMENTS, owned_rows_spec
from trainwell.deploy.input_spec import InputRefused, InputSpec
from trainwell.deploy.raw_input import read_raw_input
from trainwell.deploy.request import json_samples, npy_samples
from trainwell.errors import TrainwellError

pytestmark = pytest.mark.engine  # needs nothing of the examples

# A datamodule's raw form without a value range (float rows), and rows of byte ids right-padded
# with 0, as tests/owned/data.py's OwnedRows declares them.
SPECS = {raw: owned_rows_spec(raw) for raw in ("values", "ids")}
VALUES, IDS = SPECS["values"], SPECS["ids"]


def answers(spec: InputSpec, samples: list, stored: np.ndarray, tmp_path: Path) -> set[str]:
    """What each path says of the same samples: a JSON body, a .npy body, a .npy file."""
    buffer = io.BytesIO()
    np.save(buffer, stored)
    np.save(tmp_path / "samples.npy", stored)
    readers = [
        lambda: json_samples(json.dumps({"inputs": samples}), spec.ndim),
        lambda: npy_samples(buffer.getvalue()),
        lambda: read_raw_input(tmp_path / "samples.npy", spec),
    ]
    said = set()
    for read in readers:
        try:
            said.add(f"ok {spec.check(read()).tolist()}")
        except InputRefused as err:
            said.add(str(err))
    return said


@pytest.mark.parametrize("case", list(FORMER_DISAGREEMENTS))
def test_each_former_disagreement_gets_one_answer_on_every_path(case: str, tmp_path: Path):
    raw, samples, stored, answer = FORMER_DISAGREEMENTS[case]
    assert answers(SPECS[raw], samples, stored, tmp_path) == {answer}


def test_good_samples_come_out_as_the_models_dtype_on_every_path(tmp_path: Path):
    rows = [[3, 2, 0, 0], [7, 1, 1, 0]]
    assert answers(IDS, rows, np.array(rows, dtype=np.int64), tmp_path) == {f"ok {rows}"}
    checked = IDS.check(np.array(rows))
    assert checked.dtype == np.uint8 and IDS.lengths(checked).tolist() == [2, 3]
    values = [[0.5, 1e30, -2.0]]
    assert answers(VALUES, values, np.array(values), tmp_path) == {
        f"ok {np.array(values, dtype=np.float32).tolist()}"
    }


@pytest.mark.parametrize(
    ("spec", "samples", "words"),
    [
        (IDS, np.array([[True, False]]), "booleans"),
        (IDS, np.array([["a", "b"]]), "expected numbers"),
        (IDS, np.zeros((0, 3), dtype=np.uint8), "no samples"),
        (IDS, np.ones((1, 65), dtype=np.uint8), "65 long, over the limit of 64"),
        (IDS, np.array([[1, 2, 0, 4]]), "row 0 has a real id after its padding"),
        (IDS, np.array([[1, 256]]), "must lie in [0, 255]"),
        (VALUES, np.array([[1.0, np.inf]]), "NaN or infinity"),
        (VALUES, np.ones((1, 2, 2), dtype=np.float32), "shape ['sequence'], got [2, 2]"),
    ],
)
def test_each_rule_is_one_line(spec: InputSpec, samples: np.ndarray, words: str):
    with pytest.raises(InputRefused) as err:
        spec.check(samples, where="input=x.npy")
    assert str(err.value).startswith("input=x.npy: ") and words in str(err.value)
    assert "\n" not in str(err.value)


def test_without_a_range_the_dtype_still_bounds_an_integer_input():
    wide = InputSpec.from_dict({"dtype": "uint8", "shape": [None, 2]}, "t")
    assert wide.check(np.array([[0, 255]])).tolist() == [[0, 255]]
    with pytest.raises(InputRefused, match=r"overflow uint8: values in \[0, 300\]"):
        wide.check(np.array([[0, 300]]))  # would wrap to 44


def test_the_manifest_carries_the_whole_spec():
    for spec in (VALUES, IDS):
        entry = json.loads(json.dumps(spec.manifest()))
        assert InputSpec.from_manifest({"input": entry}) == spec
    assert IDS.manifest()["pad"] == 0 and IDS.manifest()["max_sequence"] == 64


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"dtype": "float32"}, "lacks shape"),
        ({"dtype": "nope", "shape": [None, 2]}, "not a numpy dtype"),
        ({"dtype": "str", "shape": [None, 2]}, "not a numeric dtype"),
        ({"dtype": "float32", "shape": [2, 2]}, "must open with None"),
        ({"dtype": "float32", "shape": [None, None]}, "must name exactly the None axes"),
        ({"dtype": "int64", "shape": [None, 2, 2], "pad": 0}, "pad is for rows of ids"),
    ],
)
def test_a_malformed_spec_is_one_line_naming_where_it_came_from(entry: dict, words: str):
    with pytest.raises(TrainwellError) as err:
        InputSpec.from_dict(entry, "MyData.raw_form()['input']")
    assert str(err.value).startswith("MyData.raw_form()['input']") and words in str(err.value)
