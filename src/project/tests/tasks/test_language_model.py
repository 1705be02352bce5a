"""LanguageModelTask: token-level loss, exact accumulation by tokens, token-weighted metrics.

Real Trainers with the template's parts (exact accumulation, sharded resumable loaders); a
dropout-free GELU Transformer, SGD without momentum, fp32: equal gradients give equal weights.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import torch

from project.data.sequences import IGNORE_INDEX, SequenceDataModule, pad_batch
from project.models.transformer import CausalTransformer
from project.tasks.language_model import LanguageModelTask
from project.tests.tasks.test_epoch_metrics import _fit as fit_epochs
from tests.helpers.trainers import quiet_trainer, template_trainer, templated

pytestmark = pytest.mark.example(
    "project.data.sequences", "project.models.transformer", "project.tasks.language_model"
)


def _task(cls: type[LanguageModelTask] = LanguageModelTask) -> LanguageModelTask:
    torch.manual_seed(0)  # every run starts from the same weights
    net = CausalTransformer(vocab_size=16, max_len=24, dim=32, depth=2, heads=4, dropout=0.0)
    return cls(net=net, optimizer=partial(torch.optim.SGD, lr=0.2))


def _data(batch_size: int, **kwargs: Any) -> SequenceDataModule:
    # 95 sequences -> 75 train: with micro-batches of 4 and K=4, windows of 16 x 4 and a short
    # tail of 4 + 4 + 3 sequences; their token counts all differ (lengths 4..22).
    return SequenceDataModule(
        num_sequences=95, vocab_size=16, min_len=3, max_len=24, batch_size=batch_size, **kwargs
    )


def _fit(task: LanguageModelTask, data: SequenceDataModule, accumulate: int, epochs: int) -> dict:
    trainer = template_trainer(
        accumulate_grad_batches=accumulate, precision="32-true", max_epochs=epochs
    )
    trainer.fit(task, datamodule=templated(data, seed=0))
    return {k: v.detach().clone() for k, v in task.state_dict().items()}


def _max_diff(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


class PerMicroBatchMean(LanguageModelTask):
    """The same loss without the declaration: micro-batches weigh by sequences, not tokens."""

    loss_items = None  # type: ignore[assignment]


def test_loss_ignores_padding_and_declares_real_tokens() -> None:
    task = _task().eval()
    seqs = [torch.tensor([1, 5, 6, 7, 2]), torch.tensor([1, 8, 2])]
    alone = pad_batch(seqs[1:])
    together = pad_batch(seqs)
    assert int(task.loss_items(together)) == 4 + 2
    loss_alone, _ = task._loss(alone)
    with torch.no_grad():
        logits = task(together["tokens"])[1:]
    targets = together["targets"][1:].reshape(-1)
    direct = torch.nn.functional.cross_entropy(
        logits.reshape(-1, 16), targets, ignore_index=IGNORE_INDEX
    )
    assert torch.allclose(loss_alone, direct, atol=1e-6)


def test_accumulation_is_exact_by_tokens_with_a_short_tail_window() -> None:
    accumulated = _fit(_task(), _data(4), accumulate=4, epochs=2)
    full = _fit(_task(), _data(16), accumulate=1, epochs=2)
    assert _max_diff(full, _task().state_dict()) > 0.1  # training moved the weights
    assert _max_diff(accumulated, full) <= 1e-6
    # Without the declaration each micro-batch weighs by its sequences: the steps differ.
    by_samples = _fit(_task(PerMicroBatchMean), _data(4), accumulate=4, epochs=2)
    assert _max_diff(by_samples, full) > 1e-4


def test_logged_losses_are_token_weighted_means() -> None:
    task = _task()
    results = {}
    for eval_batch in (3, 1000):
        data = _data(4, eval_batch_size=eval_batch)
        results[eval_batch] = quiet_trainer(limit_val_batches=1.0).validate(
            task, datamodule=data, verbose=False
        )[0]
    small, whole = results[3], results[1000]  # 1000: the whole split in one batch
    assert abs(small["val/loss"] - whole["val/loss"]) <= 1e-6
    assert abs(small["val/ppl"] - torch.tensor(whole["val/loss"]).exp().item()) <= 1e-5
    # a mean of the batch means (what an unweighted log would report) is measurably different
    data = _data(4, eval_batch_size=3)
    data.setup("fit")
    with torch.no_grad():
        means = [task._loss(b)[0].item() for b in data.val_dataloader()]
    assert abs(sum(means) / len(means) - whole["val/loss"]) > 1e-4


class EveryStepLanguageModel(LanguageModelTask):
    def _track(self, stage: str, loss: torch.Tensor, tokens: torch.Tensor) -> None:
        for kind in ("loss", "ppl"):
            metric = getattr(self, f"{stage}_{kind}")
            metric.update(loss.detach(), tokens)
            self.log(f"{stage}/{kind}", metric, on_step=False, on_epoch=True, prog_bar=True)


def test_language_model_epoch_values_equal_logging_at_every_step() -> None:
    def run(cls: type[LanguageModelTask]) -> list[dict]:
        torch.manual_seed(0)
        net = CausalTransformer(vocab_size=16, max_len=24, dim=16, depth=1, heads=2, dropout=0.0)
        task = cls(net=net, optimizer=partial(torch.optim.SGD, lr=0.2))
        data = SequenceDataModule(
            num_sequences=95, vocab_size=16, min_len=3, max_len=24, batch_size=4
        )
        return fit_epochs(task, data, accumulate_grad_batches=4, limit_val_batches=2)

    once, every = run(LanguageModelTask), run(EveryStepLanguageModel)
    assert len(once) == 3 and {"train/loss", "train/ppl", "val/loss", "val/ppl"} <= set(once[0])
    assert once == every
