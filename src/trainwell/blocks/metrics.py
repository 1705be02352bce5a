"""Metrics updated on the training hot path, written so an update never waits for the GPU."""

from __future__ import annotations

import torch
from torchmetrics import Metric

from trainwell import compat


class WeightedMean(compat.LeanUpdate):
    """Mean of values weighted by a count: torchmetrics' MeanMetric, minus what stalls a GPU.

    MeanMetric.update turns a python weight into a device tensor (a blocking host->device copy)
    and asks `isnan(x).any()` (a device->host read), so each training step would wait for the
    GPU to finish; its nan_strategy="disable" skips the check but then ignores the weights
    (torchmetrics 1.9). Here the count is a kernel argument and a NaN simply propagates into the
    mean (the non-finite guard is what stops a NaN run). Same state names and arithmetic as
    MeanMetric: the values computed are identical. Its update's bookkeeping skips
    nn.Module.__setattr__ (compat.LeanUpdate).
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = None
    update_detaches = True  # the value is detached first: no grad-mode switch per update

    def __init__(self) -> None:
        super().__init__()
        # Non-persistent, like MeanMetric's: the template saves metric states itself.
        self.add_state("mean_value", torch.tensor(0.0), dist_reduce_fx="sum", persistent=False)
        self.add_state("weight", torch.tensor(0.0), dist_reduce_fx="sum", persistent=False)

    def update(self, value: torch.Tensor, count: int | torch.Tensor) -> None:
        """`count`: a python int, or an integer tensor on the value's device (a token count
        computed on the GPU stays there)."""
        # In place: no nn.Module attribute write per step (states are reset by assignment).
        # A scalar value in the state's dtype (a training loss) needs no cast and no sum: a
        # product and an add, what a hand-written loop's running loss costs, and the same values.
        value = value.detach()
        if value.ndim == 0 and value.dtype == self.mean_value.dtype and isinstance(count, int):
            self.mean_value.add_(value * count)
            self.weight.add_(count)
            return
        count = count.detach() if isinstance(count, torch.Tensor) else count
        self.mean_value.add_((value.to(self.dtype) * count).sum())
        self.weight.add_(count)

    def compute(self) -> torch.Tensor:
        return self.mean_value / self.weight


class MicroAccuracy(compat.LeanUpdate):
    """Fraction of correct class predictions: MulticlassAccuracy(average="micro") for label
    predictions, at a training step's cost.

    MulticlassAccuracy formats its inputs and counts true/false positives and negatives for
    every class at each update (~25 µs of host time per step on a CPU core, a tenth of a short
    GPU step's budget); an epoch's micro accuracy needs only two counts. Same value, computed as
    correct / total in float32. Its update's bookkeeping skips nn.Module.__setattr__
    (compat.LeanUpdate).
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = True
    update_detaches = True  # counts of comparisons: nothing here can carry a gradient

    def __init__(self) -> None:
        super().__init__()
        self.add_state("correct", torch.tensor(0), dist_reduce_fx="sum", persistent=False)
        self.add_state("total", torch.tensor(0), dist_reduce_fx="sum", persistent=False)

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """`preds`: predicted class labels, the same shape as `target`."""
        # In place: no nn.Module attribute write per step (states are reset by assignment).
        self.correct.add_((preds == target).sum())
        self.total.add_(target.numel())

    def compute(self) -> torch.Tensor:
        return self.correct.float() / self.total.float()


class EpochMetricLog:
    """Which stages still have to hand their epoch metrics to `self.log` in the running epoch.

    Lightning computes, syncs and resets a logged torchmetrics Metric once, at the end of the
    epoch; what it needs from `self.log` is the object itself, and a second call in the same
    epoch only repeats that. Each call still costs about a millisecond of host time (the result
    collection moves and walks the metric), per metric, per step: on a GPU whose step takes ~10
    ms that is a tenth of the throughput. So a task logs each Metric at the first step of every
    epoch the loop runs (including the first step after a mid-epoch resume) and only updates it
    afterwards: the same epoch values, the same states in checkpoints, the same rank sync.
    """

    def __init__(self) -> None:
        self._due: set[str] = set()

    def start(self, stage: str) -> None:
        """Called from the module's on_<stage>_epoch_start, and for training from on_train_start
        too: Lightning resumes a run mid-epoch without calling on_train_epoch_start."""
        self._due.add(stage)

    def take(self, stage: str) -> bool:
        """True once per started epoch: this step logs the stage's Metric objects."""
        if stage in self._due:
            self._due.discard(stage)
            return True
        return False


class EpochMetricHooks:
    """The module hooks that start each stage's epoch for `self._epoch_log` (an EpochMetricLog).
    Mixed in before LightningModule; a subclass that overrides one of them calls super()."""

    _epoch_log: EpochMetricLog

    def on_train_start(self) -> None:
        # A run resumed mid-epoch continues that epoch without on_train_epoch_start (Lightning
        # 2.6): its metrics are due at its first step all the same.
        self._epoch_log.start("train")

    def on_train_epoch_start(self) -> None:
        self._epoch_log.start("train")

    def on_validation_epoch_start(self) -> None:
        self._epoch_log.start("val")

    def on_test_epoch_start(self) -> None:
        self._epoch_log.start("test")


class ConfusionCounts(Metric):
    """counts[t, p]: how many samples of class t were predicted p, summed over ranks.

    For validation and test only (an update is one bincount; nothing on the training path).
    Balanced accuracy, macro F1 and per-class recall all derive from it (the functions below),
    so the three figures a run reports come from one set of counts.
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = None

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = int(num_classes)
        zeros = torch.zeros(num_classes, num_classes, dtype=torch.long)
        self.add_state("counts", zeros, dist_reduce_fx="sum", persistent=False)

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """`preds`: predicted class labels, the same shape as `target`."""
        c = self.num_classes
        pairs = target.reshape(-1).long() * c + preds.reshape(-1).long()
        self.counts.add_(torch.bincount(pairs, minlength=c * c).reshape(c, c))

    def compute(self) -> torch.Tensor:
        return self.counts


def per_class_recall(counts: torch.Tensor) -> torch.Tensor:
    """Correct / samples of each class; NaN for a class with no sample (it has no recall)."""
    counts = counts.double()
    return counts.diagonal() / counts.sum(dim=1)


def balanced_accuracy(counts: torch.Tensor) -> torch.Tensor:
    """Macro recall over the classes that have samples: a model predicting only the majority
    class of C classes scores 1/C, whatever its accuracy."""
    recall = per_class_recall(counts)
    return recall[~recall.isnan()].mean()


def macro_f1(counts: torch.Tensor) -> torch.Tensor:
    """Mean F1 over the classes that have samples or predictions; a class's F1 is
    2 TP / (2 TP + FP + FN), 0 when it is never predicted correctly."""
    counts = counts.double()
    tp = counts.diagonal()
    false_pos = counts.sum(dim=0) - tp
    false_neg = counts.sum(dim=1) - tp
    seen = (counts.sum(dim=0) + counts.sum(dim=1)) > 0
    denominator = 2 * tp + false_pos + false_neg
    return (2 * tp[seen] / denominator[seen]).mean()


class BalancedAccuracy(ConfusionCounts):
    """balanced_accuracy of the counts: logged as the metric object, so Lightning syncs the
    counts across ranks, computes once at the epoch's end and resets."""

    higher_is_better = True

    def compute(self) -> torch.Tensor:
        return balanced_accuracy(self.counts).float()


class MacroF1(ConfusionCounts):
    """macro_f1 of the counts, logged as the metric object (see BalancedAccuracy)."""

    higher_is_better = True

    def compute(self) -> torch.Tensor:
        return macro_f1(self.counts).float()
