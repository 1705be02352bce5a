"""GradNormLogger: total and per-layer gradient norms to the loggers every N optimizer steps.

The earliest signal of a missing zero_grad or an LR blow-up.

Under FSDP2 each rank holds a shard of every gradient. A tensor's squared norm is the sum over
ranks of its local shard's squared norm: each rank squares its shards, and one all-reduce of one
float per tensor adds them up. Gathering the full gradients instead (`full_tensor()`) would move
the whole gradient over the network at every logging step, and hold it in memory on every rank.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


def _sharded_dims(grad: DTensor) -> tuple[int, ...] | None:
    """Mesh dims over which the local pieces add up to the whole (Shard); None if some dim holds
    an unreduced partial sum (then only the full tensor has the final values)."""
    dims = []
    for dim, placement in enumerate(grad.placements):
        if placement.is_shard():
            dims.append(dim)
        elif not placement.is_replicate():
            return None
    return tuple(dims)


def squared_norms(grads: list[torch.Tensor]) -> torch.Tensor:
    """Each gradient's squared L2 norm (float32 vector, on the gradients' device).

    A collective when any gradient is a sharded DTensor: every rank must call it on the same
    steps, with its shards of the same tensors in the same order.
    """
    pieces: list[torch.Tensor] = []
    reduce_over: dict[tuple[int, tuple[int, ...]], tuple[Any, list[int]]] = {}
    for i, grad in enumerate(grads):
        if isinstance(grad, DTensor):
            dims = _sharded_dims(grad)
            if dims is None:
                grad = grad.full_tensor()
            else:
                mesh = grad.device_mesh
                reduce_over.setdefault((id(mesh), dims), (mesh, []))[1].append(i)
                grad = grad.to_local()
        pieces.append(grad)
    squares = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in pieces]) ** 2
    for (_, dims), (mesh, members) in reduce_over.items():
        if not dims:
            continue  # replicated everywhere: the local tensor is the whole tensor
        part = squares[members]
        for dim in dims:
            dist.all_reduce(part, group=mesh.get_group(dim))
        squares[members] = part
    return squares


class GradNormLogger(L.Callback):
    """Logs `grad_norm/total` and `grad_norm/<layer>` every `every_n_steps` optimizer steps.

    A layer is a parameter's owning module (`net.features.0` for `net.features.0.weight`). Norms
    are computed only on logging steps, and read with one host sync there.
    """

    def __init__(self, every_n_steps: int = 50, per_layer: bool = True) -> None:
        super().__init__()
        self.every_n_steps = max(1, every_n_steps)
        self.per_layer = per_layer
        self._named: list[tuple[str, torch.nn.Parameter]] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Listed once per fit (after configure_model has sharded or compiled the net):
        # `named_parameters()` walks every submodule, and hashing a torchmetrics Metric on the
        # way costs more than the norms themselves, at every logging step.
        self._named = list(pl_module.named_parameters())

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        if trainer.global_step % self.every_n_steps or not trainer.loggers:
            return
        params = self._named or pl_module.named_parameters()  # called outside a fit (tests)
        named = [(n, p.grad) for n, p in params if p.grad is not None]
        if not named:
            return
        values = squared_norms([g for _, g in named]).tolist()
        metrics = {"grad_norm/total": sum(values) ** 0.5}
        if self.per_layer:
            layers: dict[str, float] = {}
            for (name, _), sq in zip(named, values, strict=True):
                layer = name.rsplit(".", 1)[0]
                layers[layer] = layers.get(layer, 0.0) + sq
            metrics |= {f"grad_norm/{k}": v**0.5 for k, v in layers.items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
