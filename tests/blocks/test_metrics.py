import pytest
import torch
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from trainwell.blocks.metrics import MicroAccuracy, WeightedMean

pytestmark = pytest.mark.engine  # needs nothing of the examples


def test_weighted_mean_equals_torchmetrics_mean_metric_bitwise() -> None:
    gen = torch.Generator().manual_seed(0)
    ours, theirs = WeightedMean(), MeanMetric()
    for count in (64, 64, 17, 1, 128):
        value = torch.rand((), generator=gen) * 3
        ours.update(value, count)
        theirs.update(value, weight=count)
    assert torch.equal(ours.compute(), theirs.compute())
    assert set(ours.metric_state) == set(theirs.metric_state)  # checkpoints carry the same keys


def test_weighted_mean_scalar_shortcut_equals_the_general_update_bitwise() -> None:
    # A float32 scalar with an int count takes the shortcut; a tensor count, a one-element
    # vector or a float64 value the general cast-multiply-sum: the same sums either way.
    gen = torch.Generator().manual_seed(1)
    fast, general = WeightedMean(), WeightedMean()
    for count in (64, 17, 1, 128):
        value = torch.rand((), generator=gen) * 3
        fast.update(value, count)
        general.update(value.reshape(1), torch.tensor(count))
    assert torch.equal(fast.compute(), general.compute())
    assert torch.equal(fast.weight, general.weight)


def test_weighted_mean_lets_a_nan_through_instead_of_dropping_it() -> None:
    mean = WeightedMean()
    mean.update(torch.tensor(1.0), 4)
    mean.update(torch.tensor(float("nan")), 4)
    assert torch.isnan(mean.compute())


def test_micro_accuracy_equals_torchmetrics_micro_accuracy_bitwise() -> None:
    gen = torch.Generator().manual_seed(0)
    ours, theirs = MicroAccuracy(), MulticlassAccuracy(10, average="micro")
    for epoch in range(2):
        for size in (64, 64, 17, 1, 128, 3):
            preds = torch.randint(0, 10, (size,), generator=gen)
            target = torch.where(torch.rand(size, generator=gen) < 0.6, preds, (preds + 1) % 10)
            ours.update(preds, target)
            theirs.update(preds, target)
        assert torch.equal(ours.compute(), theirs.compute()), epoch
        ours.reset()
        theirs.reset()
    # In-place updates never reach the defaults a reset restores.
    assert int(ours.correct) == 0 and int(ours.total) == 0


def test_training_metrics_never_join_the_graph_of_what_they_read() -> None:
    # Their updates run without torchmetrics' grad-mode switch (update_detaches): with gradients
    # on and inputs that carry them, the states must still hold plain values, as under no_grad.
    weight = torch.nn.Parameter(torch.tensor(2.0))
    mean, accuracy, reference = WeightedMean(), MicroAccuracy(), WeightedMean()
    assert torch.is_grad_enabled()
    for step in range(3):
        loss = weight * (step + 1)
        mean.update(loss, 4)
        mean.update(loss.reshape(1), torch.tensor(4.0, requires_grad=True))
        with torch.no_grad():
            reference.update(loss, 4)
            reference.update(loss.reshape(1), torch.tensor(4.0))
        scores = torch.randn(5, 3) * weight
        accuracy.update(scores.argmax(1), torch.tensor([0, 1, 2, 0, 1]))
    for state in (mean.mean_value, mean.weight, accuracy.correct, accuracy.total):
        assert not state.requires_grad and state.grad_fn is None
    assert torch.equal(mean.compute(), reference.compute())
