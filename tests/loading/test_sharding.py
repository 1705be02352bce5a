"""Dealing loaders out to ranks: every sample exactly once, matched batch counts, no padding in
evaluation, zero-weight padding batches only where a rank has no data left."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from trainwell.loading.resumable import ResumableDataLoader
from trainwell.loading.samplers import EpochShuffle, EvenSplitBatchSampler, ShardedBatchSampler
from trainwell.loading.sharding import LoaderPolicyWarning, install_loader_policy, shard_loader

pytestmark = pytest.mark.engine  # needs nothing of the examples


@pytest.mark.parametrize(("n", "batch", "world"), [(83, 4, 2), (79, 4, 3), (5, 4, 3), (64, 8, 2)])
def test_train_batches_cover_every_sample_once_with_equal_counts(n, batch, world) -> None:
    ranks = [
        ShardedBatchSampler(BatchSampler(SequentialSampler(range(n)), batch, False), world, r, True)
        for r in range(world)
    ]
    batches = [list(s) for s in ranks]
    assert len({len(b) for b in batches}) == 1  # every rank joins every all-reduce
    real = [
        i
        for r, s in enumerate(ranks)
        for k, b in enumerate(batches[r])
        if not s.is_padding(k)
        for i in b
    ]
    assert sorted(real) == list(range(n))  # once each, padding excluded
    padding = sum(s.is_padding(k) for s in ranks for k in range(len(s)))
    assert padding == len(ranks[0]) * world - -(-n // batch)


@pytest.mark.parametrize(("n", "batch", "world"), [(101, 8, 3), (37, 8, 2), (17, 8, 2), (5, 2, 4)])
def test_evaluation_split_has_no_duplicate_and_equal_batch_counts(n, batch, world) -> None:
    parts = [
        list(EvenSplitBatchSampler(SequentialSampler(range(n)), batch, world, r))
        for r in range(world)
    ]
    assert len({len(p) for p in parts}) == 1  # FSDP: no rank waits for another's forward
    assert all(len(b) <= batch for p in parts for b in p)
    assert sorted(i for p in parts for b in p for i in b) == list(range(n))


def test_epoch_shuffle_is_a_function_of_seed_and_epoch() -> None:
    a, b = EpochShuffle(10, seed=3), EpochShuffle(10, seed=3)
    a.set_epoch(1), b.set_epoch(1)
    assert (
        list(a)
        == list(b)
        == torch.randperm(10, generator=torch.Generator().manual_seed(4)).tolist()
    )


def collate_pairs(items):
    return "custom", items


def test_rebuilt_train_loader_keeps_what_shapes_batches() -> None:
    data = TensorDataset(torch.arange(10))
    loader = DataLoader(data, batch_size=4, shuffle=True, collate_fn=collate_pairs, drop_last=True)
    sharded = shard_loader(loader, world_size=1, rank=0, train=True, seed=0)
    assert isinstance(sharded, ResumableDataLoader) and sharded.collate_fn is collate_pairs
    batches = list(sharded)
    assert len(batches) == 2 and all(b[0] == "custom" and len(b[1]) == 4 for b in batches)


def test_a_loader_it_cannot_rebuild_is_left_alone_and_said_so() -> None:
    class MyLoader(DataLoader):
        pass

    loader = MyLoader(TensorDataset(torch.arange(10)), batch_size=4)
    with pytest.warns(LoaderPolicyWarning, match="MyLoader is a DataLoader subclass"):
        assert shard_loader(loader, world_size=2, rank=0, train=True, seed=0) is loader


class ValidationAsTest(L.LightningDataModule):
    """A common shape: the test loader is the validation loader."""

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.arange(40)), batch_size=16)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()


def test_a_hook_calling_another_hook_is_sharded_once() -> None:
    dm = ValidationAsTest()
    install_loader_policy(dm, seed=0)

    class ThreeRanks:
        world_size, global_rank = 3, 2

    dm.trainer = ThreeRanks()  # type: ignore[assignment]
    samples = [i for batch in dm.test_dataloader() for i in batch[0].tolist()]
    assert samples == list(range(2, 40, 3))  # rank 2's every-third sample, not a third of a third
