"""LightningDataModules: data only, no knowledge of the model."""

from project.data.base import ClassificationDataModule
from project.data.cifar10 import CIFAR10DataModule
from project.data.digits import DigitsDataModule
from project.data.sequences import SequenceDataModule
from project.data.synthetic import SyntheticDataModule

__all__ = [
    "CIFAR10DataModule",
    "ClassificationDataModule",
    "DigitsDataModule",
    "SequenceDataModule",
    "SyntheticDataModule",
]
