"""Metrics updated on the training hot path, written so an update never waits for the GPU."""

from __future__ import annotations

import torch
from torchmetrics import Metric


class WeightedMean(Metric):
    """Mean of values weighted by a count: torchmetrics' MeanMetric, minus what stalls a GPU.

    MeanMetric.update turns a python weight into a device tensor (a blocking host->device copy)
    and asks `isnan(x).any()` (a device->host read), so each training step would wait for the
    GPU to finish; its nan_strategy="disable" skips the check but then ignores the weights
    (torchmetrics 1.9). Here the count is a kernel argument and a NaN simply propagates into the
    mean (the non-finite guard is what stops a NaN run). Same state names and arithmetic as
    MeanMetric: the values computed are identical.
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = None

    def __init__(self) -> None:
        super().__init__()
        # Non-persistent, like MeanMetric's: the template saves metric states itself.
        self.add_state("mean_value", torch.tensor(0.0), dist_reduce_fx="sum", persistent=False)
        self.add_state("weight", torch.tensor(0.0), dist_reduce_fx="sum", persistent=False)

    def update(self, value: torch.Tensor, count: int) -> None:
        self.mean_value += (value.to(self.dtype) * count).sum()
        self.weight += count

    def compute(self) -> torch.Tensor:
        return self.mean_value / self.weight
