"""A softmax layer at the end of the model, then CrossEntropyLoss: the loss sits at ~log(C).

Source: https://discuss.pytorch.org/t/cross-entropy-loss-is-not-decreasing/43814/16
"""

from __future__ import annotations

from torch import nn

from tests.doctor.reported._common import Classifier, mlp


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(*mlp(), nn.Softmax(dim=1))


class Healthy(Classifier):
    """The fix: the model returns logits; cross-entropy applies log-softmax itself."""
