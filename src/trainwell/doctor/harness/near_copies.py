"""Near copies: evaluation images that are training images moved by a pixel, mirrored or saved
again (other compression, noise), which an exact hash of the samples cannot see. Each image is
averaged to one channel of at most 16x16, centred and scaled to unit length; two are near copies
when their cosine similarity, best over one-pixel shifts and a horizontal flip, reaches SIMILAR.
Bounded: the first EVAL_IMAGES of a split against the train loader's first TRAIN_IMAGES."""

from __future__ import annotations

from collections.abc import Callable
from itertools import product
from typing import Any

import torch
import torch.nn.functional as F

from trainwell.doctor.harness.samples import iterate_batches

SIMILAR = 0.98  # distinct 8x8 digits reach it for about 2% of a validation split
EVAL_IMAGES, TRAIN_IMAGES = 256, 4096
SIDE = 16  # images are compared at this resolution at most
KEPT = {-1: slice(None, -1), 0: slice(None), 1: slice(1, None)}  # not the freed edge


def images(loader: Any, limit: int, inputs: Callable[[Any], Any]) -> torch.Tensor | None:
    """The first `limit` inputs of a loader as (n, 1, h, w) images; None unless its inputs are
    float tensors with two trailing dimensions of at least 4 (images, spectrograms)."""
    rows: list[torch.Tensor] = []
    for batch in iterate_batches(loader):
        x = inputs(batch)
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 3:
            return None
        if min(x.shape[-2:]) < 4:
            return None
        x = x.detach().float().cpu().reshape(len(x), -1, *x.shape[-2:]).mean(1, keepdim=True)
        rows.append(F.adaptive_avg_pool2d(x, (min(x.shape[-2], SIDE), min(x.shape[-1], SIDE))))
        if sum(len(r) for r in rows) >= limit:
            break
    return torch.cat(rows)[:limit] if rows else None


def _unit(x: torch.Tensor) -> torch.Tensor:
    x = x.flatten(1)
    return F.normalize(x - x.mean(1, keepdim=True), dim=1)  # its eps: 1e-12


def best_similarity(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    best = torch.full((len(queries),), -1.0)
    for flipped in (queries, queries.flip(-1)):
        for dy, dx in product(KEPT, KEPT):
            moved = flipped.roll((dy, dx), dims=(-2, -1))[..., KEPT[dy], KEPT[dx]]
            sims = _unit(moved) @ _unit(keys[..., KEPT[dy], KEPT[dx]]).T
            best = torch.maximum(best, sims.max(1).values)
    return best


def twin_share(images: torch.Tensor, count: int) -> float:
    """The share of the first `count` images with a near twin among the others as they are: how
    alike the data's own samples are (a set holding each image and its mirror is not copies)."""
    sims = _unit(images[:count]) @ _unit(images).T
    sims[torch.arange(count), torch.arange(count)] = -1.0
    return float((sims.max(1).values >= SIMILAR).float().mean())
