"""Real train samples from the user's own train loader. With a map-style dataset the probes work
on indices: the batch sampler groups them, each sample is fetched once (a random augmentation is
frozen for every probe comparing two runs), the loader's `collate_fn` makes any group a batch.
Any other loader is replayed as it yields; probes that must regroup samples say why they cannot."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

import torch
from lightning.pytorch.utilities import CombinedLoader
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data.dataloader import default_collate

from trainwell import compat
from trainwell.doctor.harness.batches import leaves, same, size_of


def why_not_indexable(loader: Any) -> str:
    if not isinstance(loader, DataLoader):
        return f"the train loader is a {type(loader).__name__}, not a torch DataLoader"
    if isinstance(loader.dataset, IterableDataset):
        return f"the train dataset is an iterable {type(loader.dataset).__name__} (no indices)"
    if loader.batch_sampler is None:
        return "the train DataLoader has batch_size=None (its dataset yields whole batches)"
    if not hasattr(loader.dataset, "__getitem__"):
        return f"the train dataset {type(loader.dataset).__name__} has no __getitem__"
    return ""


def split_loaders(datamodule: Any, split: str) -> tuple[list[Any], str]:
    """A split's loaders (a datamodule may return one, a list or a dict), or why there are none."""
    if not is_overridden(f"{split}_dataloader", datamodule):
        return [], f"{type(datamodule).__name__} defines no {split}_dataloader"
    try:
        loaders = getattr(datamodule, f"{split}_dataloader")()
    except Exception as err:  # a split the datamodule declares but cannot build
        return [], f"{split}_dataloader() raised {type(err).__name__}: {err}"
    if isinstance(loaders, dict):
        loaders = list(loaders.values())
    return (list(loaders) if isinstance(loaders, list | tuple) else [loaders]), ""


def iterate_batches(loader: Any) -> Iterator[Any]:
    """Iterate what Lightning would feed training_step: containers of loaders as one batch."""
    if isinstance(loader, dict | list | tuple):
        loader = CombinedLoader(loader, "max_size_cycle")
    yield from (batch for batch, _, _ in loader) if isinstance(loader, CombinedLoader) else loader


def content(loader: Any, limit: int, part: Callable[[Any], Any] | None = None) -> list[int]:
    """The first `limit` samples of one pass, by content (of `part` of each batch: where a loader
    has no indices, all there is to compare): a hash of its row of each per-sample tensor."""
    stream: list[int] = []
    for batch in iterate_batches(loader):
        batch = part(batch) if part else batch
        rows = size_of(batch) or 1
        tensors = [t.detach().cpu() for _, t in leaves(batch) if t.dim() and t.shape[0] == rows]
        if not tensors:
            tensors, rows = [t.detach().cpu().reshape(1, -1) for _, t in leaves(batch)], 1
        stream += [hash(tuple(t[i].numpy().tobytes() for t in tensors)) for i in range(rows)]
        if len(stream) >= limit:
            break
    return stream[:limit]


COMPARED = 4096  # indices compared per epoch: enough to tell a repeat, cheap on any dataset
CONTENT_COMPARED = 1024  # samples loaded per epoch when they can only be told apart by content


def batch_source(loader: DataLoader) -> Any:
    """The loader's own batch sampler, inside the template's sharding wrapper (its `batches`)."""
    source = loader.batch_sampler
    while getattr(source, "batches", None) is not None:
        source = source.batches
    return source


def order_source(loader: DataLoader) -> Any:
    """The sampler whose order the batch sampler (and any wrapper) passes on: the innermost."""
    source = batch_source(loader)
    while getattr(source, "sampler", None) is not None:
        source = source.sampler
    return source


def two_epochs(loader: Any, by_index: bool) -> tuple[list[int], list[int]]:
    """The first samples of epochs 0 and 1 (by index or content), leaving the sampler at 0."""

    def draw(epoch: int) -> list[int]:
        compat.set_sampler_epoch(loader, epoch)
        if not by_index:
            return content(loader, CONTENT_COMPARED)
        flat = (int(i) for batch in loader.batch_sampler for i in batch)
        return list(islice(flat, COMPARED))

    try:
        return draw(0), draw(1)
    finally:
        compat.set_sampler_epoch(loader, 0)


class TrainSamples:
    """The real train loader's micro-batches, fetched lazily and cached."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.why_not_indexable = why_not_indexable(loader)
        self._items: dict[int, Any] = {}
        self._index_batches: list[list[int]] | None = None
        self._real: list[Any] = []
        self._iterator = iterate_batches(loader)  # a generator: nothing is fetched until asked

    @property
    def indexable(self) -> bool:
        return not self.why_not_indexable

    def index_batches(self) -> list[list[int]]:
        """The first epoch's micro-batches as index lists, in the loader's own order."""
        if self._index_batches is None:
            self._index_batches = [list(b) for b in self.loader.batch_sampler]
        return self._index_batches

    def collate(self, indices: list[int]) -> Any:
        for i in indices:
            if i not in self._items:
                self._items[i] = self.loader.dataset[i]
        return (self.loader.collate_fn or default_collate)([self._items[i] for i in indices])

    def collate_is_deterministic(self, indices: list[int]) -> bool:
        """Whether collate_fn gives the same batch twice (a random masking collate does not)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            a = self.collate(indices)
            torch.manual_seed(2)
            return same(a, self.collate(indices))

    def real_batches(self, n: int) -> list[Any]:
        self._real += islice(self._iterator, max(0, n - len(self._real)))
        return self._real[:n]

    def micro_batches(self, start: int, count: int) -> list[Any]:
        """Micro-batches start .. start+count-1 of the first epoch, as training_step gets them."""
        if self.indexable:
            return [self.collate(b) for b in self.index_batches()[start : start + count]]
        return self.real_batches(start + count)[start:]
