"""LightningModules: loss, metrics, optimizer and scheduler wiring around an injected net."""

from trainwell.tasks.classification import ClassificationTask

__all__ = ["ClassificationTask"]
