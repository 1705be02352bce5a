"""The net's setup in `configure_model`, shared by the template's tasks: shard, then compile."""

from __future__ import annotations

from typing import Any

import lightning as L
from torch import nn


def _strategy(module: L.LightningModule) -> Any:
    try:
        return module.trainer.strategy
    except RuntimeError:  # not attached to a Trainer (a module built by hand or by a probe)
        return None


def shard_and_compile(module: L.LightningModule, net: nn.Module, compile: bool) -> None:
    """Shard `net` when the strategy shards (trainer=fsdp: training.fsdp.FSDP2Strategy), then
    compile it when asked; each at most once, although Lightning may call configure_model again
    (fit, then test)."""
    shard = getattr(_strategy(module), "shard", None)
    if shard is not None and not getattr(module, "_sharded", False):
        # Shard before compiling: compile then traces the sharded (FSDP2 hook-carrying) net.
        shard(net)
        module._sharded = True
    if compile and not getattr(module, "_compiled", False):
        # nn.Module.compile() compiles in place: state_dict keys stay free of `_orig_mod.`,
        # so checkpoints load into compiled and plain nets alike.
        net.compile()
        module._compiled = True
