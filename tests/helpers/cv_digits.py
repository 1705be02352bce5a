"""Digits datamodules for the cross-validation tests: planted leaks and named classes."""

from __future__ import annotations

import numpy as np

from project.data.digits import DigitsDataModule


class AllDataDigits(DigitsDataModule):
    """A planted leak: mean and std fitted on every digit (validation and test included)."""

    def setup(self, stage: str | None = None) -> None:
        if self.mean is None:
            images, _ = self._load()
            self.mean, self.std = float(images.mean()), float(images.std())
        super().setup(stage)


class TrainValDigits(DigitsDataModule):
    """A planted leak: mean and std fitted on the fold's training *and* validation samples."""

    def setup(self, stage: str | None = None) -> None:
        if self.mean is None and self.cv_fold is not None:
            images, _ = self._load()
            seen = images[np.concatenate(self.cv_fold)]
            self.mean, self.std = float(seen.mean()), float(seen.std())
        super().setup(stage)


class NamedClassDigits(DigitsDataModule):
    """Digits whose raw form names the classes `class_0`... (as a cloner's own data might)."""

    def raw_form(self) -> dict:
        form = super().raw_form()
        form["classes"] = [f"class_{c}" for c in range(self.num_classes)]
        return form
