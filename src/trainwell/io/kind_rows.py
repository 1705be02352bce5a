"""The rows of a predictions file for outputs that are not class scores (io/output_kind.py
says which kind a module's are; class scores keep predict.py's own rows).

- label scores (multi-label): index, pred_<label> (1 at p >= 0.5, else 0) and p_<label> for every
  label, target_<label> when the samples have targets;
- values: index, prediction for one output ((N,) or (N, 1)), else prediction_<name> per output;
  target (target_<name>) when the samples have targets;
- other: index, output_<j> for every number of a sample's output, flattened in C order; target
  (target_<j>) when the samples have targets.

Floats are written with 9 significant digits, which give back a float32 exactly.
"""

from __future__ import annotations

import numpy as np

from trainwell.io.output_kind import LABEL_SCORES, VALUES, OutputKind

THRESHOLD = 0.5  # a label is predicted when its probability reaches it


def sigmoid(scores: np.ndarray) -> np.ndarray:
    """Per-label probabilities in float64, as the server computes them."""
    return 1.0 / (1.0 + np.exp(-scores.astype(np.float64)))


def _number(value: object) -> str:
    if isinstance(value, float | np.floating):
        return f"{float(value):.9g}"
    return str(int(value))  # type: ignore[call-overload]


def _names(prefix: str, names: list[str] | None, n: int) -> list[str]:
    return [f"{prefix}_{name}" for name in (names if names else [str(j) for j in range(n)])]


def _columns(array: np.ndarray) -> np.ndarray:
    """(N, columns): one row per sample, its numbers flattened."""
    return array.reshape(len(array), -1)


def kind_rows(
    index: np.ndarray, outputs: np.ndarray, targets: np.ndarray | None, kind: OutputKind
) -> list[str]:
    """Header and rows, in index order, of a predictions file of a non-class-score output."""
    order = np.argsort(index, kind="stable")
    flat = _columns(outputs)
    width = flat.shape[1]
    single = kind.kind == VALUES and width == 1
    names = kind.names if kind.kind != "other" else None
    if kind.kind == LABEL_SCORES:
        probs = sigmoid(flat)
        body = np.concatenate([(probs >= THRESHOLD).astype(np.int64), probs], axis=1)
        header = [*_names("pred", names, width), *_names("p", names, width)]
        cells = [
            [str(int(v)) for v in row[:width]] + [f"{p:.6f}" for p in row[width:]] for row in body
        ]
    else:
        prefix = "prediction" if kind.kind == VALUES else "output"
        header = ["prediction"] if single else _names(prefix, names, width)
        cells = [[_number(v) for v in row] for row in flat]
    truth = None if targets is None else _columns(np.asarray(targets))
    if truth is not None:
        header += ["target"] if truth.shape[1] == 1 else _names("target", names, truth.shape[1])
    lines = [",".join(["index", *header])]
    for i in order:
        row = [str(int(index[i])), *cells[i]]
        if truth is not None:
            row += [_number(v) for v in truth[i]]
        lines.append(",".join(row))
    return lines
