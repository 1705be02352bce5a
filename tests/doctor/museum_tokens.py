"""The bug museum's language-model exhibits: the language-model example's task with one planted
bug each, swapped into the shipped language-model experiment (tests/doctor/test_museum.py)."""

from __future__ import annotations

from project.tasks.language_model import LanguageModelTask


class SequenceWeightedLossTask(LanguageModelTask):
    """Logs its token-mean loss as a plain tensor: Lightning weighs each batch by sequences."""

    def training_step(self, batch, batch_idx):
        loss, _ = self._loss(batch)
        self.log("train/loss", loss, on_step=False, on_epoch=True)
        return loss


class UndeclaredTokensTask(LanguageModelTask):
    """The token-mean loss without `loss_items`: windows weigh micro-batches by sequences."""

    loss_items = None
