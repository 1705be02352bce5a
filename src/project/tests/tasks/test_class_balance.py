"""What accuracy hides on imbalanced classes: balanced accuracy, macro F1 and per-class recall
from one confusion count (validation and test only), and class weights in the training loss,
computed on the training split and kept in the checkpoint."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from sklearn.metrics import balanced_accuracy_score, f1_score, recall_score

from project.data.digits import DigitsDataModule
from project.models.digits_cnn import DigitsCNN
from project.tasks.classification import ClassificationTask
from tests.helpers.trainers import quiet_trainer
from trainwell.blocks.metrics import (
    ConfusionCounts,
    balanced_accuracy,
    macro_f1,
    per_class_recall,
)
from trainwell.errors import TrainwellError
from trainwell.training.class_recall import zero_recall_line

pytestmark = pytest.mark.example(
    "project.data.digits",
    "project.models.digits_cnn",
    "project.tasks.classification",
)

# 3 classes; rows: true class, columns: predicted
#   class 0: 4 samples, 3 right, 1 called 1
#   class 1: 2 samples, 1 right, 1 called 2
#   class 2: 4 samples, 0 right, all called 0
TARGET = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2, 2])
PREDS = torch.tensor([0, 0, 0, 1, 1, 2, 0, 0, 0, 0])


def test_metrics_of_a_hand_computed_confusion_matrix() -> None:
    metric = ConfusionCounts(3)
    metric.update(PREDS[:5], TARGET[:5])  # two batches sum
    metric.update(PREDS[5:], TARGET[5:])
    counts = metric.compute()
    assert counts.tolist() == [[3, 1, 0], [0, 1, 1], [4, 0, 0]]
    assert per_class_recall(counts).tolist() == [3 / 4, 1 / 2, 0.0]
    assert balanced_accuracy(counts).item() == pytest.approx((3 / 4 + 1 / 2 + 0) / 3, abs=1e-12)
    # F1 = 2TP / (2TP + FP + FN): class 0: 6 / (6 + 4 + 1); class 1: 2 / (2 + 1 + 1); class 2: 0
    assert macro_f1(counts).item() == pytest.approx((6 / 11 + 2 / 4 + 0) / 3, abs=1e-12)
    # and scikit-learn agrees
    y, p = TARGET.numpy(), PREDS.numpy()
    assert balanced_accuracy(counts).item() == pytest.approx(balanced_accuracy_score(y, p))
    assert macro_f1(counts).item() == pytest.approx(f1_score(y, p, average="macro"))
    assert per_class_recall(counts).tolist() == pytest.approx(recall_score(y, p, average=None))


def test_a_majority_classifier_has_high_accuracy_and_low_balanced_accuracy() -> None:
    target = torch.tensor([0] * 90 + [1] * 10)
    metric = ConfusionCounts(2)
    metric.update(torch.zeros(100, dtype=torch.long), target)
    assert balanced_accuracy(metric.compute()).item() == 0.5  # accuracy would say 0.9
    assert per_class_recall(metric.compute()).tolist() == [1.0, 0.0]


def test_a_class_without_samples_does_not_count_in_the_macro_recall() -> None:
    counts = torch.tensor([[2, 0, 0], [0, 1, 1], [0, 0, 0]])
    assert per_class_recall(counts)[2].isnan()
    assert balanced_accuracy(counts).item() == pytest.approx(0.75)


def make_task(**kwargs) -> ClassificationTask:
    torch.manual_seed(0)
    return ClassificationTask(
        net=DigitsCNN(width=4), optimizer=partial(torch.optim.SGD, lr=0.1), **kwargs
    )


def test_val_and_test_log_the_macro_metrics_and_training_does_not_count(
    tmp_path, monkeypatch
) -> None:
    calls: list[int] = []
    update = ConfusionCounts.update
    monkeypatch.setattr(
        ConfusionCounts, "update", lambda self, p, t: (calls.append(len(t)), update(self, p, t))
    )
    task = make_task()
    dm = DigitsDataModule(batch_size=64, seed=0)
    trainer = quiet_trainer(
        max_epochs=1, limit_train_batches=3, limit_val_batches=0, default_root_dir=tmp_path
    )
    trainer.fit(task, datamodule=dm)
    assert calls == []  # nothing on the training path
    trainer = quiet_trainer(max_epochs=1, limit_val_batches=1.0, default_root_dir=tmp_path)
    (validated,) = trainer.validate(task, datamodule=dm)
    assert {"val/acc", "val/balanced_acc", "val/macro_f1"} <= set(validated)
    assert sum(calls) == 2 * 180  # every validation sample once, in each of the two metrics
    (tested,) = trainer.test(task, datamodule=dm)
    recalls = [tested[f"test/recall/{c}"] for c in range(10)]
    assert tested["test/balanced_acc"] == pytest.approx(sum(recalls) / 10, abs=1e-6)
    assert {"test/acc", "test/loss", "test/macro_f1"} <= set(tested)


def test_balanced_class_weights_come_from_the_training_split_and_live_in_the_checkpoint(
    tmp_path,
) -> None:
    dm = DigitsDataModule(batch_size=64, seed=0, rare_classes=[5, 6, 7, 8, 9], rare_fraction=0.1)
    task = make_task(loss={"class_weights": "balanced"})
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1, default_root_dir=tmp_path)
    trainer.fit(task, datamodule=dm)
    counts = torch.bincount(dm.train_set.tensors[1], minlength=10).double()
    want = counts.sum() / (10 * counts)
    assert torch.allclose(task.class_weights.double(), want, rtol=1e-6)
    assert task.class_weights[5] > 5 * task.class_weights[0]  # the rare classes weigh more
    trainer.save_checkpoint(tmp_path / "w.ckpt")
    saved = torch.load(tmp_path / "w.ckpt", weights_only=True)["state_dict"]["class_weights"]
    assert torch.equal(saved, task.class_weights)


def test_the_weighted_loss_is_a_mean_over_samples_of_weighted_losses() -> None:
    weights = [float(c + 1) for c in range(10)]
    task = make_task(loss={"class_weights": weights})
    logits = torch.randn(6, 10, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 9, 9, 3])
    per_sample = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    want = (per_sample * torch.tensor(weights)[y]).sum() / 6
    assert torch.allclose(task._training_loss(logits, y), want)


def test_no_class_weights_by_default_and_bad_ones_refused() -> None:
    task = make_task()
    assert "class_weights" not in task.state_dict()  # checkpoints keep their keys
    logits, y = torch.randn(4, 10), torch.tensor([0, 1, 2, 3])
    assert torch.equal(task._training_loss(logits, y), task.criterion(logits, y))
    with pytest.raises(TrainwellError, match="balanced, a list of 10"):
        make_task(loss={"class_weights": "inverse"})
    with pytest.raises(TrainwellError, match="needs 10 finite non-negative"):
        make_task(loss={"class_weights": [1.0, 2.0]})


def test_a_class_with_recall_0_is_named_in_one_line() -> None:
    metrics = {"test/acc": 0.9, "test/recall/0": 1.0, "test/recall/1": 0.0, "test/recall/2": 0.5}
    line = zero_recall_line(metrics)
    assert "recall 0 on class(es) 1:" in line and "\n" not in line
    assert zero_recall_line({**metrics, "test/recall/1": 0.1}) == ""
    assert zero_recall_line({"test/recall/3": float("nan")}) == ""
