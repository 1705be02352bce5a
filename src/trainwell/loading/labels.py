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


def _as_labels(values: Any, n: int) -> torch.Tensor:
    try:
        labels = torch.as_tensor(values).detach().cpu()
    except (TypeError, ValueError, RuntimeError) as err:
        raise TrainwellError(f"the labels are not integer class ids ({err})") from err
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TrainwellError(f"the labels are {labels.dtype}, not integer class ids")
    if labels.dim() != 1 or len(labels) != n:
        raise TrainwellError(
            f"the targets have shape {tuple(labels.shape)}, not one class id per sample"
        )
    return labels.long()


def dataset_labels(dataset: Dataset, limit: int | None = None) -> torch.Tensor:
    """One integer class id per sample, in dataset order.

    Read from, in this order: a `Subset` (its indices into the parent's labels), a
    `TensorDataset` of (inputs, labels), a `labels` / `targets` attribute (torchvision datasets,
    trainwell's on-device images), a wrapped `dataset` attribute of the same length (per-sample
    augmentation), and last the second element of every sample (loads each one; refused above
    `limit` samples).
    """
    n = len(dataset)  # type: ignore[arg-type]
    if isinstance(dataset, Subset):
        parent = dataset_labels(dataset.dataset, limit)
        return parent[torch.as_tensor(dataset.indices, dtype=torch.long)]
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
        return _as_labels(dataset.tensors[1], n)
    for name in ("labels", "targets"):
        values = getattr(dataset, name, None)
        if values is not None and not callable(values):
            return _as_labels(values, n)
    inner = getattr(dataset, "dataset", None)
    if isinstance(inner, Dataset) and len(inner) == n:  # type: ignore[arg-type]
        return dataset_labels(inner, limit)
    if limit is not None and n > limit:
        raise TrainwellError(
            f"{type(dataset).__name__} has no labels attribute and {n} samples (over {limit}) "
            "to load one by one"
        )
    labels = []
    for i in range(n):
        sample = dataset[i]
        if not isinstance(sample, tuple | list) or len(sample) != 2:
            raise TrainwellError(
                f"{type(dataset).__name__} samples are not (input, label) pairs, so their classes "
                "are unknown; give the datamodule a sample_weights() method"
            )
        labels.append(torch.as_tensor(sample[1]).reshape(-1))
    return _as_labels(torch.cat(labels) if labels else torch.zeros(0, dtype=torch.long), n)


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


def probability_columns(classes: list[str] | None, n: int) -> list[str]:
    """The class-probability columns of a predictions file and of the out-of-fold predictions:
    `p_<class>` for each of the `n` classes, named as the datamodule names them (its raw form's
    `classes`), else by number."""
    names = [str(c) for c in classes] if classes else [str(i) for i in range(n)]
    return [f"p_{name}" for name in names]
