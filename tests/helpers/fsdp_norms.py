"""A 2-rank FSDP2 (gloo, CPU) worker for the gradient-norm test, spawned by torch.multiprocessing."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def net() -> nn.Module:
    torch.manual_seed(0)
    # 7 output rows over 2 ranks: uneven shards (4 + 3), the case a padded norm would get wrong.
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def batch() -> torch.Tensor:
    return torch.randn(4, 5, generator=torch.Generator().manual_seed(1))


def worker(rank: int, world: int, port: int, out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from trainwell.callbacks.grad_norm import squared_norms

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = net()
        fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
        model(batch()).pow(2).sum().backward()
        grads = [p.grad for p in model.parameters()]
        got = squared_norms(grads)
        full = torch.stack([g.full_tensor().norm() ** 2 for g in grads])
        torch.save({"got": got, "full": full}, Path(out_dir) / f"rank{rank}.pt")
        # The sharded model and its mesh hold the gloo group: freed only at interpreter exit, its
        # worker threads abort the process ("terminate called without an active exception") in
        # about 1 of 8 runs. Freed here, before the group is destroyed: 0 of 40.
        del model, grads, got, full
        gc.collect()
    finally:
        dist.destroy_process_group()
