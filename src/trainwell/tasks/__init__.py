"""LightningModules: loss, metrics, optimizer and scheduler wiring around an injected net."""

from trainwell.tasks.classification import ClassificationTask
from trainwell.tasks.language_model import LanguageModelTask

__all__ = ["ClassificationTask", "LanguageModelTask"]
