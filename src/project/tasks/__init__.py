"""LightningModules: loss, metrics, optimizer and scheduler wiring around an injected net."""

from project.tasks.classification import ClassificationTask
from project.tasks.language_model import LanguageModelTask

__all__ = ["ClassificationTask", "LanguageModelTask"]
