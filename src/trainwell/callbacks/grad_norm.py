"""GradNormMonitor: total and per-layer gradient norms to the loggers every N optimizer steps.

The earliest signal of a missing zero_grad or an LR blow-up.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch.distributed.tensor import DTensor


def _full(grad: torch.Tensor) -> torch.Tensor:
    """Under FSDP2 a gradient is a DTensor shard: the layer's norm needs the whole tensor
    (a collective, so every rank calls this on the same steps)."""
    return grad.full_tensor() if isinstance(grad, DTensor) else grad


class GradNormMonitor(L.Callback):
    """Logs `grad_norm/total` and `grad_norm/<layer>` every `every_n_steps` optimizer steps.

    A layer is a parameter's owning module (`net.features.0` for `net.features.0.weight`). Norms
    are computed only on logging steps: one fused foreach_norm over the gradients.
    """

    def __init__(self, every_n_steps: int = 50, per_layer: bool = True) -> None:
        super().__init__()
        self.every_n_steps = max(1, every_n_steps)
        self.per_layer = per_layer

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        if trainer.global_step % self.every_n_steps or not trainer.loggers:
            return
        named = [(n, _full(p.grad)) for n, p in pl_module.named_parameters() if p.grad is not None]
        if not named:
            return
        norms = [torch.linalg.vector_norm(g) for _, g in named]
        squares = torch.stack(norms).float() ** 2
        metrics = {"grad_norm/total": float(squares.sum().sqrt())}
        if self.per_layer:
            layers: dict[str, float] = {}
            for (name, _), sq in zip(named, squares.tolist(), strict=True):
                layer = name.rsplit(".", 1)[0]
                layers[layer] = layers.get(layer, 0.0) + sq
            metrics |= {f"grad_norm/{k}": v**0.5 for k, v in layers.items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
