"""Each rank's share of a loader: the 1-process batches, dealt out without padding or dropping.

Lightning's default under DDP is a `DistributedSampler`, which pads every split to a multiple of
the world size by repeating samples: a 101-sample test split is evaluated as 102 on 2 ranks, and
training sees duplicates a 1-process run does not. Here instead:

* the loader's own batches are computed on every rank, in the order a single process would see
  them (a shuffle is a function of the seed and the epoch only);
* evaluation loaders give rank r every W-th sample (ranks hold one sample more or fewer), cut into
  the same number of batches on every rank, none larger than the loader's batch size: metrics
  sum, then divide, and under FSDP, where every forward gathers parameters from all ranks, no rank
  waits for a forward another rank never runs;
* the train loader deals out whole batches, rank r of W taking batches r, r+W, r+2W, ..., and gives every rank the same number of micro-batches, because every rank must
  join the same gradient all-reduces. A rank with no batch left in the epoch's last round gets a
  *padding* batch (a copy of a real one) whose items count zero (callbacks/accumulation.py), so it
  joins the collectives without contributing to the gradient.

So W ranks x K accumulation steps on batches of B see, window for window, the same samples as one
process accumulating K x W batches of B (or K batches of W x B). BatchNorm layers do see a padding
batch in their running statistics; nothing else does.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
)

from trainwell.errors import TrainwellError
from trainwell.loading.labels import class_counts, dataset_labels
from trainwell.loading.resumable import (
    ResumableDataLoader,
    ResumableStreamLoader,
    restartable_stream,
)
from trainwell.loading.samplers import (
    EpochShuffle,
    EvenSplitBatchSampler,
    ShardedBatchSampler,
    WeightedEpochDraw,
)


def _loader_kwargs(loader: DataLoader) -> dict[str, Any]:
    """Everything that shapes what a loader yields, except how indices are batched."""
    kwargs: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    return kwargs


def _global_order(sampler: Sampler, dataset: Any, seed: int, draw: EpochDraw | None) -> Sampler:
    """The 1-process order as a function of (seed, epoch): a plain shuffle becomes EpochShuffle,
    and any order becomes a WeightedEpochDraw when the datamodule asks for weighted sampling."""
    if draw is not None:
        generator = getattr(sampler, "generator", None)
        return WeightedEpochDraw(
            draw.weights, draw.num_samples, generator.initial_seed() if generator else seed
        )
    if (
        isinstance(sampler, RandomSampler)
        and not sampler.replacement
        and sampler.num_samples == len(dataset)
    ):
        generator = sampler.generator
        return EpochShuffle(len(dataset), generator.initial_seed() if generator else seed)
    return sampler


class EpochDraw:
    """What a datamodule asked for with `sampler="weighted"`: one weight per training sample and
    the samples drawn per epoch (None: the split's size)."""

    def __init__(self, weights: torch.Tensor, num_samples: int | None) -> None:
        self.weights, self.num_samples = weights, num_samples


SAMPLERS = ("shuffle", "weighted")


def epoch_draw(datamodule: Any, loader: Any) -> EpochDraw | None:
    """The datamodule's weighted-sampling request for its train `loader`, or None.

    A datamodule asks with a `sampler` attribute set to "weighted" (trainwell's datamodules:
    `data.sampler=weighted`) and sizes the epoch with `samples_per_epoch`. The weights are its
    `sample_weights()` (one non-negative number per training sample) if it has that method, else
    inverse class frequency: every class is drawn equally often on average.
    """
    kind = getattr(datamodule, "sampler", None)
    if not isinstance(kind, str) or kind == "shuffle":
        return None  # a user's own `sampler` attribute (a Sampler object, say) is theirs
    if kind != "weighted":
        raise TrainwellError(f"data.sampler={kind!r} is not one of {', '.join(SAMPLERS)}")
    if not isinstance(loader, DataLoader):
        raise TrainwellError(
            f"data.sampler=weighted needs train_dataloader() to return one DataLoader, "
            f"not a {type(loader).__name__}"
        )
    dataset = loader.dataset
    hook = getattr(datamodule, "sample_weights", None)
    if callable(hook):
        weights = torch.as_tensor(hook(), dtype=torch.float64).reshape(-1)
        source = f"{type(datamodule).__name__}.sample_weights()"
    else:
        labels = dataset_labels(dataset)
        weights = 1.0 / class_counts(labels).double()[labels]
        source = "inverse class frequency"
    if len(weights) != len(dataset):
        raise TrainwellError(
            f"{source} gave {len(weights)} weights for {len(dataset)} training samples"
        )
    if not torch.isfinite(weights).all() or (weights < 0).any() or float(weights.sum()) <= 0:
        raise TrainwellError(f"{source} must be finite, non-negative and not all 0")
    num_samples = getattr(datamodule, "samples_per_epoch", None)
    if num_samples is not None and int(num_samples) < 1:
        raise TrainwellError(f"data.samples_per_epoch must be >= 1, got {num_samples}")
    return EpochDraw(weights, None if num_samples is None else int(num_samples))


class LoaderPolicyWarning(UserWarning):
    """A loader trainwell cannot shard exactly or make resumable; what it means is in the text."""


def shard_loader(
    loader: Any, world_size: int, rank: int, train: bool, seed: int, draw: EpochDraw | None = None
) -> Any:
    """The loader rank `rank` should iterate (containers of loaders are handled element-wise).

    Train loaders are always rebuilt (also on one process) as a ResumableDataLoader: a mid-epoch
    resume continues with the batches that were next. `draw` (train only) replaces the loader's
    order by a weighted draw with replacement, dealt out the same way.
    """
    if isinstance(loader, (list, tuple)):
        return type(loader)(shard_loader(x, world_size, rank, train, seed, draw) for x in loader)
    if isinstance(loader, dict):
        return {k: shard_loader(v, world_size, rank, train, seed, draw) for k, v in loader.items()}
    if train and draw is None and type(loader) is DataLoader and restartable_stream(loader.dataset):
        # An iterable dataset that restarts at any sample resumes exactly mid-epoch (it must
        # give each rank its own share itself: there is no index to deal out).
        return ResumableStreamLoader(
            loader.dataset,
            batch_size=loader.batch_size,
            drop_last=loader.drop_last,
            **_loader_kwargs(loader),
        )
    problem = _unshardable(loader)
    if draw is not None and (problem or type(loader.batch_sampler) is not BatchSampler):
        raise TrainwellError(
            f"data.sampler=weighted needs a plain DataLoader with batch_size over a map-style "
            f"dataset: {problem or 'the train loader has its own batch_sampler'}"
        )
    if problem:
        if train or world_size > 1:
            warnings.warn(
                f"{problem}: trainwell leaves this {'train' if train else 'evaluation'} loader as "
                "it is, so "
                + (
                    "each rank must yield its own, equally long share of the data and "
                    if world_size > 1
                    else ""
                )
                + "a mid-epoch resume replays or skips samples of its epoch (checkpoints at epoch "
                "ends resume exactly: callbacks.step_checkpoint=null writes no mid-epoch ones)",
                LoaderPolicyWarning,
                stacklevel=2,
            )
        return loader
    if not train and world_size == 1:
        return loader
    base = loader.batch_sampler
    batches: Sampler[list[int]]
    if type(base) is BatchSampler and not train:
        batches = EvenSplitBatchSampler(base.sampler, base.batch_size, world_size, rank)
    else:
        if type(base) is BatchSampler:
            base = BatchSampler(
                _global_order(base.sampler, loader.dataset, seed, draw if train else None),
                base.batch_size,
                base.drop_last,
            )
        batches = ShardedBatchSampler(base, world_size, rank, pad=train)
    generator_seed = loader.generator.initial_seed() if loader.generator is not None else seed
    if train:
        return ResumableDataLoader(
            loader.dataset,
            batch_sampler=batches,
            generator=torch.Generator(),
            seed=generator_seed,
            **_loader_kwargs(loader),
        )
    return DataLoader(
        loader.dataset,
        batch_sampler=batches,
        generator=torch.Generator().manual_seed(generator_seed),
        **_loader_kwargs(loader),
    )


def _unshardable(loader: Any) -> str:
    if not isinstance(loader, DataLoader):
        return f"a {type(loader).__name__} is not a torch DataLoader"
    if type(loader) not in (DataLoader, ResumableDataLoader):
        return f"{type(loader).__name__} is a DataLoader subclass trainwell cannot rebuild"
    if isinstance(loader.dataset, IterableDataset):
        return (
            f"{type(loader.dataset).__name__} is an iterable dataset (no index to shard by) "
            "without set_epoch(epoch) and start_at(index)"
        )
    if loader.batch_sampler is None:
        return "the DataLoader has batch_size=None (no batches to deal out)"
    if isinstance(loader.batch_sampler, ShardedBatchSampler):
        return "the loader is already sharded"
    if isinstance(getattr(loader.batch_sampler, "sampler", None), DistributedSampler):
        return "the loader already uses a DistributedSampler"
    return ""


def install_loader_policy(datamodule: Any, seed: int) -> None:
    """Route the datamodule's loaders through `shard_loader` for the Trainer it is attached to.

    Wraps only the hooks the datamodule defines (Lightning treats a defined hook as a split that
    exists). Idempotent.
    """
    from lightning.pytorch.utilities.model_helpers import is_overridden

    if getattr(datamodule, "_trainwell_loader_policy", False):
        return
    for name, train in (
        ("train_dataloader", True),
        ("val_dataloader", False),
        ("test_dataloader", False),
        ("predict_dataloader", False),
    ):
        if not is_overridden(name, datamodule):
            continue
        original = getattr(datamodule, name)

        def hook(original: Any = original, train: bool = train) -> Any:
            if getattr(datamodule, "_trainwell_in_hook", False):
                # test_dataloader returning self.val_dataloader(): shard once, in the outer hook
                return original()
            datamodule._trainwell_in_hook = True
            try:
                loader = original()
            finally:
                datamodule._trainwell_in_hook = False
            trainer = getattr(datamodule, "trainer", None)
            world, rank = (trainer.world_size, trainer.global_rank) if trainer else (1, 0)
            draw = epoch_draw(datamodule, loader) if train else None
            return shard_loader(loader, world, rank, train, seed, draw)

        setattr(datamodule, name, hook)
    datamodule._trainwell_loader_policy = True
