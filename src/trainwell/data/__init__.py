"""LightningDataModules: data only, no knowledge of the model."""

from trainwell.data.base import ClassificationDataModule
from trainwell.data.cifar10 import CIFAR10DataModule
from trainwell.data.digits import DigitsDataModule
from trainwell.data.sequences import SequenceDataModule
from trainwell.data.synthetic import SyntheticDataModule

__all__ = [
    "CIFAR10DataModule",
    "ClassificationDataModule",
    "DigitsDataModule",
    "SequenceDataModule",
    "SyntheticDataModule",
]
