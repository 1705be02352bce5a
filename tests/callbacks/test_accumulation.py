"""Exact accumulation: each optimizer step follows the mean loss over every item of its window.

Plain LightningModules (nothing from trainwell in them) through a Trainer with the template's
parts, fp32 on CPU, smooth normalisation-free nets and SGD without momentum: one step's update is
lr x gradient, so equal gradients mean equal weights.
"""

from __future__ import annotations

import re
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.trainers import template_trainer, templated
from trainwell.callbacks.accumulation import ItemCountError

pytestmark = pytest.mark.engine  # plain modules only: nothing of the examples

LR = 0.5


class Classifier(L.LightningModule):
    """What a user writes: the micro-batch mean, no knowledge of accumulation."""

    def __init__(self, features: int = 6, classes: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)  # every run starts from the same weights
        self.net = nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Linear(8, classes))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LR)


class Points(L.LightningDataModule):
    def __init__(self, n: int, batch_size: int, shuffle: bool = True) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.data = TensorDataset(
            torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)
        )
        self.batch_size, self.shuffle = batch_size, shuffle

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.data,
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            generator=torch.Generator().manual_seed(5),
        )


def fit(module: L.LightningModule, data: L.LightningDataModule, accumulate: int, **kw: Any) -> dict:
    trainer = template_trainer(accumulate_grad_batches=accumulate, precision="32-true", **kw)
    trainer.fit(module, datamodule=templated(data, seed=5))
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def max_diff(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_four_micro_batches_of_8_equal_one_batch_of_32() -> None:
    accumulated = fit(Classifier(), Points(64, 8), accumulate=4, max_steps=1)
    full = fit(Classifier(), Points(64, 32), accumulate=1, max_steps=1)
    assert max_diff(full, Classifier().state_dict()) > 1e-3  # the step moved the weights
    assert max_diff(accumulated, full) <= 1e-6


def test_short_uneven_tail_windows_over_two_epochs() -> None:
    # 38 samples, batch 4, K=4: windows of 16, 16 and a tail of 6 (micro-batches 4 + 2) per
    # epoch; batch 16 without accumulation steps on exactly the same samples.
    accumulated = fit(Classifier(), Points(38, 4), accumulate=4, max_epochs=2)
    full = fit(Classifier(), Points(38, 16), accumulate=1, max_epochs=2)
    assert max_diff(accumulated, full) <= 1e-6


def test_uneven_micro_batches_in_one_window_weigh_each_sample_once() -> None:
    # 36 samples, batch 8, K=5: one window of 8+8+8+8+4 (a mean of means would double the last 4).
    accumulated = fit(Classifier(), Points(36, 8), accumulate=5, max_epochs=1)
    full = fit(Classifier(), Points(36, 36), accumulate=1, max_epochs=1)
    assert max_diff(accumulated, full) <= 1e-6


# -- token-level losses: the module declares what its loss averages over -------------------------

PAD = -100


class Tokens(L.LightningDataModule):
    """Sequences of 2..9 tokens, padded per micro-batch to its longest: the number of real tokens
    varies from micro-batch to micro-batch (and so does the padding). Batches are dicts."""

    def __init__(self, batch_size: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(2)
        lengths = torch.randint(2, 10, (24,), generator=g).tolist()
        self.seqs = [torch.randint(0, 5, (n,), generator=g) for n in lengths]
        self.batch_size = batch_size

    @staticmethod
    def collate(items: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        longest = max(len(s) for s in items)
        tokens = torch.zeros(len(items), longest, dtype=torch.long)
        targets = torch.full((len(items), longest), PAD)
        for i, s in enumerate(items):
            tokens[i, : len(s)] = s
            targets[i, : len(s)] = (s + 1) % 5
        return {"tokens": tokens, "targets": targets}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.seqs, batch_size=self.batch_size, collate_fn=self.collate)


class TokenModel(L.LightningModule):
    """Cross-entropy averaged over real (non-padding) tokens, as every language model does."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(5, 8)
        self.head = nn.Linear(8, 5)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self.head(torch.tanh(self.embed(batch["tokens"])))
        return F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=PAD)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LR)


class DeclaredTokenModel(TokenModel):
    def loss_items(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return (batch["targets"] != PAD).sum()


def test_token_level_loss_is_exact_by_tokens_when_declared() -> None:
    accumulated = fit(DeclaredTokenModel(), Tokens(4), accumulate=3, max_epochs=1)
    full = fit(DeclaredTokenModel(), Tokens(12), accumulate=1, max_epochs=1)
    assert max_diff(accumulated, full) <= 1e-6
    # Counted by samples instead, the window over-weights the tokens of short micro-batches.
    undeclared = fit(TokenModel(), Tokens(4), accumulate=3, max_epochs=1)
    assert max_diff(undeclared, full) > 1e-4


class BadCount(TokenModel):
    def __init__(self, count: Any) -> None:
        super().__init__()
        self.count = count

    def loss_items(self, batch: dict[str, torch.Tensor]) -> Any:
        return self.count


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "returned 0"),
        (-3, "returned -3"),
        (2.5, "returned 2.5"),
        (True, "returned True"),
        (torch.tensor(7.0), "returned 7.0"),
        (torch.tensor([1, 2]), "returned (2,)"),
    ],
)
def test_a_bad_declaration_stops_before_any_step(count: Any, shown: str) -> None:
    module = BadCount(count)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    with pytest.raises(ItemCountError, match=re.escape("BadCount.loss_items " + shown)) as err:
        fit(module, Tokens(4), accumulate=2, max_epochs=1)
    assert "\n" not in str(err.value)
    assert max_diff(module.state_dict(), before) == 0.0  # nothing was trained


def test_manual_optimization_is_left_alone() -> None:
    class Manual(Classifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(super().training_step(batch, batch_idx))
            opt.step()

    plain = Manual()
    L.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(plain, datamodule=Points(20, 4, shuffle=False))  # fmt: skip
    with_template = fit(Manual(), Points(20, 4, shuffle=False), accumulate=1, max_epochs=1)
    assert max_diff(with_template, plain.state_dict()) == 0.0


def test_fp16_scaled_window_is_normalised_before_clipping() -> None:
    """Lightning's fp16 GradScaler path (run on CPU): the loss is scaled by 2**16, unscaled before
    `on_before_optimizer_step`, where the window's count divides it, and only then clipped. One
    window of 16 + 8 samples (factor 2 x 16 / 24 != 1): the step is exactly the clip norm."""
    from lightning.pytorch.plugins import MixedPrecision

    module = Classifier()
    start = [p.detach().clone() for p in module.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    clip = 0.05
    trainer = template_trainer(
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
        gradient_clip_val=clip,
        accumulate_grad_batches=2,
        max_steps=1,
    )
    trainer.fit(module, datamodule=templated(Points(24, 16, shuffle=False)))
    assert scaler.get_scale() == 2.0**16  # no overflow: the step ran
    step = torch.linalg.vector_norm(
        torch.stack(
            [(p.detach() - s).norm() for p, s in zip(module.parameters(), start, strict=True)]
        )
    ).item()
    assert step == pytest.approx(clip * LR, rel=1e-3)


class StreamOfPoints(torch.utils.data.IterableDataset):
    """An iterable dataset without a length: nothing about the epoch is known in advance."""

    def __init__(self, n: int) -> None:
        self.data = Points(n, 1).data

    def __iter__(self):
        return iter(self.data)


class Streamed(L.LightningDataModule):
    def __init__(self, n: int, batch_size: int) -> None:
        super().__init__()
        self.n, self.batch_size = n, batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(StreamOfPoints(self.n), batch_size=self.batch_size)


def test_an_iterable_dataset_accumulates_exactly_without_knowing_its_length() -> None:
    # 38 samples, batch 4, K=4 (windows 16, 16, 6) vs batch 16 (16, 16, 6), counted as they come.
    with pytest.warns(UserWarning, match="iterable dataset"):
        accumulated = fit(Classifier(), Streamed(38, 4), accumulate=4, max_epochs=2)
    full = fit(Classifier(), Points(38, 16, shuffle=False), accumulate=1, max_epochs=2)
    assert max_diff(accumulated, full) <= 1e-6


class TwoSources(L.LightningDataModule):
    """A dict of loaders (Lightning's CombinedLoader): batches are dicts of (x, y) batches."""

    def train_dataloader(self) -> dict[str, DataLoader]:
        return {
            "a": DataLoader(Points(20, 4).data, batch_size=4),
            "b": DataLoader(Points(20, 4).data, batch_size=2),
        }


class TwoSourcesModel(Classifier):
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        x = torch.cat([batch["a"][0], batch["b"][0]])
        y = torch.cat([batch["a"][1], batch["b"][1]])
        return F.cross_entropy(self.net(x), y)

    def loss_items(self, batch: dict) -> int:
        return len(batch["a"][1]) + len(batch["b"][1])


def test_a_dict_of_loaders_accumulates_by_its_declared_count() -> None:
    # The first 5 combined batches of 4 + 2 samples, K=5: one window = the mean over its 30
    # samples (all 20 of source a, the first 10 of source b).
    accumulated = fit(TwoSourcesModel(), TwoSources(), accumulate=5, max_steps=1)
    module = Classifier()
    x, y = Points(20, 4).data.tensors
    x, y = torch.cat([x, x[:10]]), torch.cat([y, y[:10]])
    F.cross_entropy(module.net(x), y).backward()
    with torch.no_grad():
        for p in module.parameters():
            p -= LR * p.grad
    assert max_diff(accumulated, module.state_dict()) <= 1e-6
