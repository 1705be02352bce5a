"""Whether an export reproduces eval: each exported path's outputs against the eager module's on
the same raw samples, by what the output means (agreement of the decisions for class and label
scores; max absolute and relative differences for values), and the refusal when they do not."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwell.errors import TrainwellError
from trainwell.io.kind_rows import THRESHOLD, sigmoid
from trainwell.io.output_kind import CLASS_SCORES, LABEL_SCORES, VALUES


class ExportFailed(TrainwellError):
    """The module could not be exported, or the exported files do not reproduce eval."""


VALUES_RTOL = 1e-5  # a value's own share it may differ by on another runtime (float32)


def parity_figures(
    eager: np.ndarray,
    others: dict[str, np.ndarray],
    targets: np.ndarray | None,
    kind: str = CLASS_SCORES,
) -> dict[str, Any]:
    """Per path: agreement of the predicted classes (labels) with eager for class (label)
    scores, and the max |difference| of the outputs; eager's own accuracy (per-label accuracy,
    mean absolute error for values) where the samples have targets. Values and other outputs
    have no agreement: the max relative difference stands beside the absolute one."""
    figures: dict[str, Any] = {"samples": len(eager), "paths": {}}
    decide = _decisions(kind)
    ref = None if decide is None else decide(eager)
    for name, out in {"eager": eager, **others}.items():
        entry: dict[str, Any] = {}
        if name != "eager":
            if ref is not None:
                entry["agreement"] = float((decide(out) == ref).mean())
            entry["max_abs_diff"] = float(np.abs(out - eager).max())
            if ref is None:
                diff = np.abs(out - eager)
                scale = np.maximum(np.abs(eager), np.finfo(np.float32).tiny)
                entry["max_rel_diff"] = float((diff / scale).max())
                # Values carry their units: float32 rounds 2e5 in steps of 0.016, so a value
                # may also differ by VALUES_RTOL of itself (what `tolerance` is checked against).
                beyond = np.maximum(diff - VALUES_RTOL * np.abs(eager), 0.0)
                entry["max_abs_diff_beyond_rtol"] = float(beyond.max())
        if targets is not None:
            entry.update(_score(kind, out, targets, decide))
        figures["paths"][name] = entry
    return figures


def _decisions(kind: str) -> Any:
    """What a kind predicts from its outputs (for agreement), or None for values and others."""
    if kind == CLASS_SCORES:
        return lambda out: out.argmax(-1)
    if kind == LABEL_SCORES:
        return lambda out: sigmoid(out) >= THRESHOLD
    return None


def _score(kind: str, out: np.ndarray, targets: np.ndarray, decide: Any) -> dict[str, float]:
    if kind == CLASS_SCORES:
        return {"accuracy": float((decide(out) == targets).mean())}
    if kind == LABEL_SCORES:
        return {"label_accuracy": float((decide(out) == targets.astype(bool)).mean())}
    if kind == VALUES:
        return {"mae": float(np.abs(out.reshape(targets.shape) - targets).mean())}
    return {}


def check_parity(figures: dict[str, Any], tolerance: float) -> None:
    for name, entry in figures["paths"].items():
        if name == "eager":
            continue
        agreement = entry.get("agreement", 1.0)
        beyond = entry.get("max_abs_diff_beyond_rtol", entry["max_abs_diff"])
        if agreement < 1.0 or beyond > tolerance:
            agreed = f"agreement {agreement:.4%}, " if "agreement" in entry else ""
            relative = (
                f", max relative {entry['max_rel_diff']:.3g} (values may also differ by "
                f"{VALUES_RTOL:g} of themselves)"
                if "max_rel_diff" in entry
                else ""
            )
            raise ExportFailed(
                f"export parity failed: {name} vs eager {agreed}"
                f"max |d output| {entry['max_abs_diff']:.3g}{relative} (tolerance {tolerance:g}: "
                "the export's parity_tolerance); no export written"
            )
