"""The class labels of a dataset, read without loading its inputs where the dataset allows it.

The weighted sampler, class-weighted losses and the doctor's class-balance check all need the
training split's labels; loading every image (and running its augmentation) to get them would
cost an epoch of data loading on CIFAR-10.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from trainwell.errors import TrainwellError


def _as_labels(values: Any) -> torch.Tensor:
    labels = torch.as_tensor(values).detach().reshape(-1).cpu()
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise TrainwellError(f"the labels are {labels.dtype}, not integer class ids")
    return labels.long()


def dataset_labels(dataset: Dataset) -> torch.Tensor:
    """One integer class id per sample, in dataset order.

    Read from, in this order: a `Subset` (its indices into the parent's labels), a
    `TensorDataset` of (inputs, labels), a `labels` / `targets` attribute (torchvision datasets,
    trainwell's on-device images), a wrapped `dataset` attribute of the same length (per-sample
    augmentation), and last the second element of every sample (loads each one).
    """
    if isinstance(dataset, Subset):
        return dataset_labels(dataset.dataset)[torch.as_tensor(dataset.indices, dtype=torch.long)]
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
        return _as_labels(dataset.tensors[1])
    for name in ("labels", "targets"):
        values = getattr(dataset, name, None)
        if values is not None and not callable(values):
            return _as_labels(values)
    inner = getattr(dataset, "dataset", None)
    if isinstance(inner, Dataset) and len(inner) == len(dataset):  # type: ignore[arg-type]
        return dataset_labels(inner)
    labels = []
    for i in range(len(dataset)):  # type: ignore[arg-type]
        sample = dataset[i]
        if not isinstance(sample, tuple | list) or len(sample) != 2:
            raise TrainwellError(
                f"{type(dataset).__name__} samples are not (input, label) pairs, so their classes "
                "are unknown; give the datamodule a sample_weights() method"
            )
        labels.append(int(sample[1]))
    return torch.tensor(labels, dtype=torch.long)


def class_counts(labels: torch.Tensor, num_classes: int | None = None) -> torch.Tensor:
    """Samples per class id (0 .. max label, or `num_classes`)."""
    if labels.numel() and int(labels.min()) < 0:
        raise TrainwellError(f"a label is {int(labels.min())}: class ids start at 0")
    return torch.bincount(labels, minlength=num_classes or 0)


def balanced_class_weights(counts: torch.Tensor) -> torch.Tensor:
    """n / (C x n_c) per class: every class weighs as much in total, and the mean weight over
    the samples is 1, so the loss keeps its scale. A class with no sample gets 0 (it is never a
    target, so its weight is never used)."""
    present = counts > 0
    classes = int(present.sum())
    weights = torch.zeros(len(counts), dtype=torch.float64)
    weights[present] = counts.sum().double() / (classes * counts[present].double())
    return weights
