"""data.sampler=weighted: one global draw per epoch as a function of (seed, epoch), dealt out to
ranks like a shuffle, resumable mid-epoch without loading consumed samples, and drawing classes
in the shares it promises."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from project.data.digits import DigitsDataModule
from trainwell.errors import TrainwellError
from trainwell.loading.samplers import WeightedEpochDraw
from trainwell.loading.sharding import EpochDraw, install_loader_policy, shard_loader

pytestmark = pytest.mark.example("project.data.digits")

N_MAJOR, N_MINOR = 90, 10  # "90% dogs and 10% cats"


class CountingLabels(Dataset):
    """(index, label) pairs that count how many samples were loaded."""

    def __init__(self, labels: torch.Tensor) -> None:
        self.labels, self.loads = labels, 0

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[int, int]:
        self.loads += 1
        return i, int(self.labels[i])


def imbalanced_labels() -> torch.Tensor:
    return torch.cat(
        [torch.zeros(N_MAJOR, dtype=torch.long), torch.ones(N_MINOR, dtype=torch.long)]
    )


class Imbalanced(L.LightningDataModule):
    """A plain LightningDataModule (nothing from trainwell) asking for weighted sampling."""

    sampler = "weighted"

    def __init__(self, batch_size: int = 4, samples_per_epoch: int | None = None) -> None:
        super().__init__()
        self.batch_size, self.samples_per_epoch = batch_size, samples_per_epoch
        self.dataset = CountingLabels(imbalanced_labels())

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.dataset,
            batch_size=self.batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(7),
        )


class Ranks:
    def __init__(self, world: int, rank: int) -> None:
        self.world_size, self.global_rank = world, rank


def rank_loaders(world: int, batch_size: int = 4, **kwargs) -> list[DataLoader]:
    loaders = []
    for rank in range(world):
        dm = Imbalanced(batch_size=batch_size, **kwargs)
        install_loader_policy(dm, seed=0)
        dm.trainer = Ranks(world, rank)  # type: ignore[assignment]
        loaders.append(dm.train_dataloader())
    return loaders


def epoch_batches(loader: DataLoader, epoch: int) -> list[list[int]]:
    loader.batch_sampler.sampler.set_epoch(epoch)  # what Lightning calls every epoch
    return [batch[0].tolist() for batch in loader]


def test_the_draw_is_a_function_of_seed_and_epoch() -> None:
    weights = torch.rand(50, generator=torch.Generator().manual_seed(1))
    a, b = WeightedEpochDraw(weights, 30, seed=3), WeightedEpochDraw(weights, 30, seed=3)
    a.set_epoch(2), b.set_epoch(2)
    expected = torch.multinomial(
        weights.double(), 30, True, generator=torch.Generator().manual_seed(5)
    )
    assert list(a) == list(b) == expected.tolist()
    b.set_epoch(3)
    assert list(b) != list(a)  # a new draw every epoch
    torch.manual_seed(123)  # the global RNG plays no part
    assert list(a) == expected.tolist()


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("epoch", [0, 1])
def test_ranks_take_disjoint_shares_of_the_one_process_draw(world: int, epoch: int) -> None:
    # 100 samples in batches of 4 -> 25 batches: 2 ranks get 13 (one padding), 3 get 9 (two)
    (single,) = rank_loaders(1)
    want = epoch_batches(single, epoch)
    loaders = rank_loaders(world)
    got = [epoch_batches(loader, epoch) for loader in loaders]
    assert len({len(g) for g in got}) == 1  # every rank joins every all-reduce
    dealt = []
    for m in range(len(got[0])):
        for r, loader in enumerate(loaders):
            if not loader.batch_sampler.is_padding(m):
                dealt.append(got[r][m])
    assert dealt == want  # batch for batch, the one-process order: same samples, same windows


def test_a_mid_epoch_resume_continues_bitwise_and_loads_only_what_is_left() -> None:
    (reference,) = rank_loaders(1)
    full = epoch_batches(reference, 1)
    for position in (0, 1, 12, len(full) - 1):
        (before,) = rank_loaders(1)
        before.batch_sampler.sampler.set_epoch(1)
        iterator = iter(before)
        seen = [next(iterator)[0].tolist() for _ in range(position)]
        state = before.state_dict()
        (after,) = rank_loaders(1)
        after.load_state_dict(state)
        after.batch_sampler.sampler.set_epoch(1)
        loads_before = after.dataset.loads
        rest = [batch[0].tolist() for batch in after]
        assert seen + rest == full, position
        # the consumed batches are never loaded: the start does not grow with the position
        assert after.dataset.loads - loads_before == sum(len(b) for b in full[position:])


def test_samples_per_epoch_sets_the_epoch_length() -> None:
    (loader,) = rank_loaders(1, samples_per_epoch=37)
    batches = epoch_batches(loader, 0)
    assert len(loader) == len(batches) == math.ceil(37 / 4)
    assert sum(len(b) for b in batches) == 37
    (default,) = rank_loaders(1)
    assert sum(len(b) for b in epoch_batches(default, 0)) == N_MAJOR + N_MINOR


def test_batches_hold_the_classes_in_equal_shares_within_a_stated_tolerance() -> None:
    """Inverse class frequency: each draw is the minority class with probability 1/2. Over an
    epoch of n draws the minority share has standard deviation sqrt(0.25 / n); the test allows
    5 of them (a seeded draw, but a correct sampler would miss this bound with p < 1e-6)."""
    n, batch = 4000, 40
    (loader,) = rank_loaders(1, batch_size=batch, samples_per_epoch=n)
    labels = imbalanced_labels()
    shares = []
    for epoch in range(3):
        batches = epoch_batches(loader, epoch)
        minority = torch.tensor([float((labels[b] == 1).float().mean()) for b in batches])
        shares.append(float(minority.mean()))
    tolerance = 5 * math.sqrt(0.25 / n)
    assert all(abs(s - 0.5) <= tolerance for s in shares), (shares, tolerance)
    # a plain shuffle keeps the data's 10% (what the weighted draw corrects)
    plain = DataLoader(CountingLabels(labels), batch_size=batch, shuffle=True)
    assert sum(int((b[1] == 1).sum()) for b in plain) == N_MINOR


def test_a_datamodule_can_give_its_own_sample_weights() -> None:
    class OnlyEvenSamples(Imbalanced):
        def sample_weights(self) -> torch.Tensor:
            return (torch.arange(len(self.dataset)) % 2 == 0).double()

    dm = OnlyEvenSamples()
    install_loader_policy(dm, seed=0)
    drawn = [i for batch in dm.train_dataloader() for i in batch[0].tolist()]
    assert len(drawn) == len(dm.dataset) and all(i % 2 == 0 for i in drawn)
    assert len(set(drawn)) > 20  # drawn with replacement from the 50 even samples


def test_trainwell_datamodules_take_data_sampler_weighted() -> None:
    dm = DigitsDataModule(rare_classes=[5, 6, 7, 8, 9], rare_fraction=0.1, sampler="weighted")
    install_loader_policy(dm, seed=0)
    dm.setup("fit")
    labels = torch.cat([batch[1] for batch in dm.train_dataloader()])
    rare = float((labels >= 5).float().mean())
    # ~5% of the cut training split, ~50% of the weighted draw (n ~ 690: 5 sd ~ 0.1)
    assert 0.4 <= rare <= 0.6, rare


def test_bad_requests_are_one_line_errors() -> None:
    with pytest.raises(TrainwellError, match="shuffle or weighted"):
        DigitsDataModule(sampler="balanced")

    class WrongLength(Imbalanced):
        def sample_weights(self) -> torch.Tensor:
            return torch.ones(3)

    dm = WrongLength()
    install_loader_policy(dm, seed=0)
    with pytest.raises(TrainwellError, match="gave 3 weights for 100 training samples"):
        dm.train_dataloader()
    loader = DataLoader(TensorDataset(torch.arange(8)), batch_sampler=[[0, 1], [2, 3]])
    with pytest.raises(TrainwellError, match="own batch_sampler"):
        shard_loader(loader, 1, 0, True, 0, EpochDraw(torch.ones(8), None))
