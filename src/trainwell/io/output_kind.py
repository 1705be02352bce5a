"""What a task's outputs mean, in one place: predict, export and serve read it from here.

A LightningModule declares it with plain class attributes (no trainwell import), as HF models
declare `problem_type`:

    class MyRegressor(L.LightningModule):
        output_kind = "values"                  # class_scores | label_scores | values | other
        output_names = ["progression"]          # optional: a name per output column

- `class_scores`: (N, classes) unnormalised scores of one class per sample (HF's
  single_label_classification): the prediction is the argmax, softmax gives probabilities.
- `label_scores`: (N, labels) unnormalised scores of independent labels (multi_label_
  classification): sigmoid gives each label's probability, a label is predicted at p >= 0.5.
- `values`: (N,) or (N, outputs) numbers in the units the module returns (regression).
- `other`: whatever the module returns, written as returned.

A module that declares nothing, trained on a datamodule whose raw form names `classes`, keeps
the meaning those names have always had: class scores over them. Otherwise an undeclared output
is `other`: written as returned, never argmaxed.

The prediction is what the module's `predict_step` returns, as in Lightning, when the module
defines one; else its `forward` on the batch's input. `predict_step` gets the batch as the
split's loader yields it, and `[inputs]` (what a DataLoader over `TensorDataset(inputs)` yields)
for input= files, the exported graph and so the server (deploy/prediction.py calls it).

Torch-free: the server reads the kinds from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainwell.errors import TrainwellError

KIND_HOOK = "output_kind"
NAMES_HOOK = "output_names"
STEP_HOOK = "predict_step"

CLASS_SCORES = "class_scores"
LABEL_SCORES = "label_scores"
VALUES = "values"
OTHER = "other"
MEANINGS = {
    CLASS_SCORES: "unnormalised class scores (softmax gives probabilities)",
    LABEL_SCORES: "unnormalised scores of independent labels (sigmoid gives each label's "
    "probability; predicted at p >= 0.5)",
    VALUES: "values, as the module's prediction returns them",
    OTHER: "the module's prediction, as it returns it",
}


@dataclass(frozen=True)
class OutputKind:
    kind: str
    names: list[str] | None  # classes, labels or value names; None: by position
    declared_by: str  # who said so, for messages and the manifest

    @property
    def meaning(self) -> str:
        return MEANINGS[self.kind]

    def manifest(self) -> dict[str, Any]:
        return {"kind": self.kind, "declared_by": self.declared_by, "names": self.names}


def declared_kind(module: Any, classes: list[str] | None) -> OutputKind:
    """The module's declared kind; without one, class scores over a raw form's `classes`, else
    `other`. A kind that is not one of the four is refused in one line."""
    name = type(module).__name__
    kind = getattr(module, KIND_HOOK, None)
    names = getattr(module, NAMES_HOOK, None)
    if names is not None:
        if isinstance(names, str) or not all(isinstance(n, str | int) for n in names):
            raise TrainwellError(f"{name}.{NAMES_HOOK} must be a list of names, got {names!r}")
        names = [str(n) for n in names]
    if kind is not None:
        if kind not in MEANINGS:
            raise TrainwellError(
                f"{name}.{KIND_HOOK} = {kind!r}: choose one of {', '.join(MEANINGS)}"
            )
        if kind == CLASS_SCORES and names is None:
            names = classes
        return OutputKind(str(kind), names, f"{name}.{KIND_HOOK}")
    if classes is not None:
        return OutputKind(CLASS_SCORES, names or classes, "the raw form's classes")
    return OutputKind(OTHER, names, "nothing (undeclared: written as returned)")
