"""The one line a run prints when its best checkpoint never recognises a class.

Accuracy on imbalanced data can look fine while a rare class is never predicted; a module that
logs per-class recall as `test/recall/<class>` (a classification task may) gets it said at
the end of the run.
"""

from __future__ import annotations

import math

PREFIX = "test/recall/"


def zero_recall_line(metrics: dict[str, float]) -> str:
    """'' unless some `test/recall/<class>` is 0."""
    zero = [
        key[len(PREFIX) :]
        for key, value in metrics.items()
        if key.startswith(PREFIX) and not math.isnan(value) and value == 0.0
    ]
    if not zero:
        return ""
    return (
        f"the tested checkpoint has recall 0 on class(es) {', '.join(zero)}: it never predicts "
        "them correctly on the test split; see docs/running.md, 'Imbalanced classes'"
    )
