"""The four ways the server's request check and predict's `input=` check once disagreed, for the
two raw forms of tests/owned/data.py's OwnedRows, with the one answer every path gives now.

Each case: (OwnedRows' `raw=`, the samples as a JSON body's "inputs", the same samples as a
.npy array stores them, the one-line answer)."""

from __future__ import annotations

import numpy as np

FORMER_DISAGREEMENTS = {
    "an empty row where the sequence axis is dynamic": (
        "values",
        [[]],
        np.zeros((1, 0), dtype=np.float32),
        "samples have no values along axis 1 (sequence); each needs at least one",
    ),
    "1e39 in float64 for a float32 model": (
        "values",
        [[1e39, 1.0]],
        np.array([[1e39, 1.0]]),
        "inputs overflow float32 (|value| up to 1e+39)",
    ),
    "a row of padding only": (
        "ids",
        [[0, 0, 0]],
        np.zeros((1, 3), dtype=np.uint8),
        "row 0 is all padding (id 0): each row starts with a real id and ends in its padding "
        "run, if any (right padding only)",
    ),
    "whole-number floats for a uint8 model": (
        "ids",
        [[3.0, 2.0]],
        np.array([[3.0, 2.0]]),
        "inputs are floating-point numbers; the model takes uint8 integers (send 3, not 3.0)",
    ),
}


def owned_rows_spec(raw: str):
    """The InputSpec predict builds from OwnedRows(raw=raw).raw_form()."""
    from tests.owned.data import OwnedRows
    from trainwell.deploy.raw import raw_data

    return raw_data(OwnedRows(raw=raw)).spec
