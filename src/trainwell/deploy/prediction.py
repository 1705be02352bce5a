"""The module's prediction: its `predict_step` where it defines one (as in Lightning), else its
forward; what predict writes and what export puts into the graph after the preprocessing
(io/output_kind.py says what it means).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
import torch
from torch import nn

from trainwell.errors import TrainwellError, first_line
from trainwell.io.output_kind import (
    CLASS_SCORES,
    LABEL_SCORES,
    STEP_HOOK,
    VALUES,
    OutputKind,
)


def defines_predict_step(module: nn.Module) -> bool:
    """True when the module overrides Lightning's predict_step (whose default calls forward on
    the whole batch, labels included)."""
    own = getattr(type(module), STEP_HOOK, None)
    return own is not None and own is not L.LightningModule.predict_step


def predict_step(module: nn.Module, batch: Any, batch_idx: int) -> torch.Tensor:
    """module.predict_step(batch, batch_idx) as one tensor, or one line naming the cause."""
    name = type(module).__name__
    try:
        out = module.predict_step(batch, batch_idx)
    except (RuntimeError, TypeError, ValueError, IndexError, KeyError) as err:
        raise TrainwellError(
            f"{name}.predict_step cannot take {_describe(batch)}: {first_line(err)}"
        ) from err
    if not isinstance(out, torch.Tensor):
        raise TrainwellError(
            f"{name}.predict_step returns {type(out).__name__}: predict, export and serve take "
            "one tensor, a row per sample"
        )
    return out


def _describe(batch: Any) -> str:
    if isinstance(batch, list | tuple):
        return f"a {type(batch).__name__} of {len(batch)}"
    return type(batch).__name__


class Prediction(nn.Module):
    """The module's prediction on model inputs: predict_step([inputs]) when it defines one, else
    forward(inputs). What the exported graph computes after the preprocessing."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.step = defines_predict_step(module)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.step:
            return self.module.predict_step([inputs], 0)
        return self.module(inputs)


def check_shape(outputs: np.ndarray, kind: OutputKind, module: nn.Module) -> None:
    """Class and label scores are (N, classes); values (N,) or (N, outputs)."""
    producer = f"{type(module).__name__}.{STEP_HOOK if defines_predict_step(module) else 'forward'}"
    if kind.kind in (CLASS_SCORES, LABEL_SCORES) and outputs.ndim != 2:
        raise TrainwellError(
            f"{producer} returns shape {list(outputs.shape)}: {kind.kind} (declared by "
            f"{kind.declared_by}) are (N, classes)"
        )
    if kind.kind == VALUES and outputs.ndim not in (1, 2):
        raise TrainwellError(
            f"{producer} returns shape {list(outputs.shape)}: values are (N,) or (N, outputs)"
        )
    named = kind.names is not None and kind.kind in (LABEL_SCORES, VALUES)
    if named and outputs.ndim == 2 and len(kind.names) != outputs.shape[1]:
        raise TrainwellError(
            f"{producer} returns {outputs.shape[1]} columns but {kind.declared_by} names "
            f"{len(kind.names)}"
        )
