"""The owned modules with one planted bug each: what the engine's checks must catch."""

from __future__ import annotations

from typing import Any

import torch

from tests.owned.task import OwnedClassifier, OwnedNet


class SoftmaxNet(OwnedNet):
    """Returns probabilities: cross-entropy applies log_softmax on top (squashed gradients)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).softmax(dim=1)


class TrainInValidation(OwnedClassifier):
    """Custom validation code that calls self.train(): dropout is active while validating."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.train()
        super().validation_step(batch, batch_idx)


class ModeRecorder(OwnedClassifier):
    """Healthy; records (stage, the set of its modules' training flags, autograd on, inference
    mode on) at every step, in the class (an in-process run builds the module from the config)."""

    seen: list[tuple[str, frozenset[bool], bool, bool]] = []

    def _record(self, stage: str) -> None:
        modes = frozenset(m.training for m in self.modules())
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        ModeRecorder.seen.append((stage, modes, grad, inference))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._record("train")
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._record("val")
        super().validation_step(batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._record("test")
        super().test_step(batch, batch_idx)
