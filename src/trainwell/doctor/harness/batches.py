"""Batches of any structure (tensors, tuples, lists, dicts, dataclasses, nested; never assumed
`(inputs, targets)`), replayed through a real DataLoader as the user's own loader yields them."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from lightning.pytorch.utilities.data import extract_batch_size
from torch.utils.data import DataLoader


def leaves(batch: Any, path: str = "batch") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(batch, torch.Tensor):
        yield path, batch
    elif isinstance(batch, Mapping):
        for key, value in batch.items():
            yield from leaves(value, f"{path}[{key!r}]")
    elif isinstance(batch, list | tuple):
        for i, value in enumerate(batch):
            yield from leaves(value, f"{path}[{i}]")
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        for f in dataclasses.fields(batch):
            yield from leaves(getattr(batch, f.name), f"{path}.{f.name}")


def same(a: Any, b: Any) -> bool:
    a, b = dict(leaves(a)), dict(leaves(b))
    return a.keys() == b.keys() and all(torch.equal(t, b[p]) for p, t in a.items())


def size_of(batch: Any) -> int | None:
    """Items in a batch as Lightning (and the template's default item count) sees it."""
    try:
        with warnings.catch_warnings(action="ignore"):  # "ambiguous collection": as Lightning
            return int(extract_batch_size(batch))
    except Exception:  # Lightning raises a MisconfigurationException when it finds no tensor
        return None


def integral(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def _from_lengths(lengths: torch.Tensor, ids: torch.Tensor) -> torch.Tensor | None:
    """Padding of `ids` (N, T) past each row's length, when `lengths` (N,) reads as such: the
    longest is T, none is 0, and one value fills every position past a length (the pad id)."""
    if lengths.dim() != 1 or len(lengths) != ids.shape[0] or not integral(lengths):
        return None
    if int(lengths.min()) < 1 or int(lengths.max()) != ids.shape[1]:
        return None
    pad = torch.arange(ids.shape[1], device=ids.device) >= lengths[:, None].to(ids.device)
    filled = ids[pad]
    return pad if filled.numel() and bool((filled == filled[0]).all()) else None


def _trailing_fill(ids: torch.Tensor) -> torch.Tensor | None:
    """Padding of `ids` (N, T) by a pad id: a value found only in runs that end rows, runs of
    several lengths with one of 2 or more and no row all padding, as padding to the batch's
    longest row leaves them (an end-of-sequence id that only ends full rows is no padding)."""
    for value in ids[:, -1].unique():
        at = ids == value
        # a run that ends the row: every position after a match matches too
        suffix = at.flip(1).cumprod(1).flip(1).bool()
        runs = suffix.sum(1)
        ends_rows_only = bool((at == suffix).all()) and not bool(suffix.all(1).any())
        if ends_rows_only and len(runs.unique()) > 1 and int(runs.max()) >= 2:
            return suffix
    return None


@dataclass
class Padding:
    where: str  # how it was told, for messages
    pad: torch.Tensor  # true at padding
    marker: str  # the path of the mask, the lengths, or the tensor a pad id fills
    pad_id: int | None = None  # set when the marker is padded with this id


def padding_positions(batch: Any) -> Padding | None:
    """Where the batch is padded, read from, in order: a 2-d tensor whose key names a mask
    (`mask`, `attention_mask`: true or 1 at real positions; `padding_mask`, `pad_mask`: true at
    padding); a 1-d tensor of lengths of a 2-d integer tensor padded past them with one id
    (`(ids, lengths, label)` tuples); a pad id filling the ends of a 2-d integer tensor's rows."""
    found = list(leaves(batch))
    for path, t in found:
        name = path.lower()
        if "mask" not in name or t.dim() != 2 or not (t.dtype == torch.bool or t.max() <= 1):
            continue
        pad = t.bool() if "pad" in name else ~t.bool()
        if bool(pad.any()) and not bool(pad.all()):
            return Padding(path, pad, path)
    ids = [(path, t) for path, t in found if t.dim() == 2 and integral(t) and t.shape[1] > 1]
    for path, lengths in found:
        for _, t in ids:
            if (pad := _from_lengths(lengths, t)) is not None:
                return Padding(f"the lengths in {path}", pad, path)
    for path, t in ids:
        if (pad := _trailing_fill(t)) is not None:
            pad_id = int(t[pad][0])
            return Padding(f"the pad id {pad_id} in {path}", pad, path, pad_id)
    return None


def restructure(
    batch: Any, leaf: Callable[[Any], Any], is_leaf: Callable[[Any], bool] = torch.is_tensor
) -> Any:
    """The batch with the same containers, `leaf` applied wherever `is_leaf`, the rest kept."""
    if is_leaf(batch):
        return leaf(batch)
    again = partial(restructure, leaf=leaf, is_leaf=is_leaf)
    if isinstance(batch, Mapping):
        return type(batch)({k: again(v) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, list | tuple):
        parts = [again(v) for v in batch]  # a namedtuple takes them one by one
        return type(batch)(*parts) if hasattr(batch, "_fields") else type(batch)(parts)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(
            batch, **{f.name: again(getattr(batch, f.name)) for f in dataclasses.fields(batch)}
        )
    return batch


def clone(batch: Any) -> Any:
    """A deep copy of the tensors: a training_step editing its batch must not edit a replay."""
    return restructure(batch, torch.Tensor.clone)


def rows(batch: Any, index: list[int]) -> Any:
    """The batch's samples at `index` (in that order, repeats allowed): dim 0 of every tensor
    with one row per sample, and lists of one non-tensor value per sample; the rest kept."""
    n = size_of(batch)

    def per_sample(x: Any) -> bool:
        return x.dim() > 0 and x.shape[0] == n if torch.is_tensor(x) else _per_sample_list(x, n)

    def take(x: Any) -> Any:
        return x[torch.tensor(index)] if torch.is_tensor(x) else type(x)(x[i] for i in index)

    return restructure(batch, take, per_sample)


class ConcatError(ValueError):
    """The batches cannot be joined along their first dimension (ragged or non-tensor parts)."""


def _per_sample_list(x: Any, n: int | None) -> bool:
    plain = isinstance(x, list | tuple) and not hasattr(x, "_fields")
    return plain and len(x) == n and next(leaves(x), None) is None


def concat(batches: list[Any], sizes: list[int | None] | None = None) -> Any:
    """Join same-structured batches along dim 0 (every tensor's trailing shape must agree), lists
    of one non-tensor value per sample as lists; `sizes`: the batches' item counts (top: read)."""
    sizes = [size_of(b) for b in batches] if sizes is None else sizes
    first = batches[0]
    if isinstance(first, torch.Tensor):
        shapes = {tuple(b.shape[1:]) for b in batches}
        if first.dim() == 0 or len(shapes) > 1:
            raise ConcatError(f"tensors of shapes {sorted(shapes)} cannot be concatenated")
        return torch.cat(batches)
    if isinstance(first, Mapping):
        if any(set(b) != set(first) for b in batches):
            raise ConcatError("the batches have different keys")
        return type(first)({k: concat([b[k] for b in batches], sizes) for k in first})  # type: ignore[call-arg]
    if all(_per_sample_list(b, n) for b, n in zip(batches, sizes, strict=True)):
        return type(first)(x for b in batches for x in b)
    if isinstance(first, list | tuple):
        if any(len(b) != len(first) for b in batches):
            raise ConcatError("the batches have different lengths")
        parts = [concat([b[i] for b in batches], sizes) for i in range(len(first))]
        return type(first)(*parts) if hasattr(first, "_fields") else type(first)(parts)
    if all(b == first for b in batches):
        return first
    raise ConcatError(f"non-tensor parts of type {type(first).__name__} differ between batches")


def replay_loader(batches: list[Any], repeats: int = 1) -> DataLoader:
    """A DataLoader yielding these already-built batches in order, `repeats` times (batch_size=
    None: the user's collate_fn already made them; item counts are read from the batches)."""
    order = [i for _ in range(repeats) for i in range(len(batches))]
    return DataLoader(order, batch_size=None, shuffle=False, collate_fn=lambda i: clone(batches[i]))
