"""Lightning 2.6's WeightAveraging / EMAWeightAveraging and torch's AveragedModel: what they do
that the template's EMA (callbacks/ema.py) must not, and the average it keeps instead.

The template's EMA is a callback of its own, not a subclass of Lightning's: of WeightAveraging's
ten hooks it would replace seven (where the average is built, both validation swaps, the end of
training, saving, loading, its state) for the reasons below, and what is left (a four-line
per-step trigger, an epoch trigger it must switch off) is clearer written out than inherited.
Its average is `PlacedAverage`, not an AveragedModel (1., 2.). What it keeps of Lightning's is
the checkpoint layout: `state_dict` the average, `current_model_state` the trained weights,
`averaging_state` the count, so either callback reads the other's checkpoints.
Each behaviour has a test in tests/test_compat.py that fails once upstream changes it.

---------------------------------------------------------------------------------------------
1. Where the average lives. WeightAveraging.setup (Lightning 2.6.6) builds
   `AveragedModel(deepcopy(pl_module))` in the callbacks' `setup`, before the strategy moves the
   module to its device, converts it to the run's precision and (FSDP2) shards it: on a GPU the
   average stays in host memory and every update copies every weight to the host; under
   `trainer.precision=64-true` it keeps float32; and a module with `configure_model` is built a
   second time outside the strategy, unsharded (FSDP support: Lightning-AI/pytorch-lightning#21414,
   still open, gathers the full weights on every rank at every update). No upstream report of
   the device and dtype case found; the callback came in Lightning-AI/pytorch-lightning#20545.
   Here the average is built at `on_fit_start` from the module as placed: same devices, dtypes
   and FSDP2 shards, tensors only (no second copy of the module's code, hooks or metrics). Each
   rank averages its own shard (the EMA is elementwise: no communication); a checkpoint gathers
   the shards, a resume scatters them.

2. The update. AveragedModel.update_parameters (torch 2.14.1) reads its device-side count twice per
   update (`bool(self.n_averaged == 0)`, `if self.n_averaged > 0`): two host syncs per optimizer
   step on a GPU (pytorch/pytorch#157705 and #175085), and EMAWeightAveraging passes a
   per-tensor `avg_fn`: three kernels per tensor. Here the count is a host integer and one fused
   `torch._foreach_lerp_` (private torch) updates every floating tensor.

3. After training. WeightAveraging.on_train_end copies the average into the module: a checkpoint
   saved after that (a user's `trainer.save_checkpoint` after fit) stores the average as the
   trained weights too (`current_model_state`), and training continued from it restarts from the
   average. No upstream report found; projects hit the same loss of the trained weights on
   resume (atomistic-machine-learning/schnetpack#785, ecmwf/anemoi-core#1373). Here the two
   swap: the module ends with the average, the average's container keeps the trained weights,
   and a later checkpoint still holds both.

4. Testing a checkpoint. Lightning 2.6.6 restores callbacks in every stage (checkpoint_connector
   `_restore_modules_and_callbacks`), and WeightAveraging.on_load_checkpoint, whenever it has an
   average (as after fit), loads `current_model_state` over the averaged `state_dict`:
   `trainer.fit(...)` then `trainer.test(ckpt_path="best")` tests the trained weights, not the
   average. No upstream report found. Here the trained weights are loaded only to continue a fit.

5. Before the first update. With `update_starting_at_step` (or a run shorter than it),
   WeightAveraging swaps its average into the module for every validation and at the end of
   training whether or not it was ever updated: until then the "average" is the fit-start copy,
   so validation scores the untrained weights, best.ckpt holds them, and test, predict, export and
   serve follow (Lightning-AI/pytorch-lightning#21724, fixes proposed in #21732 and #21754).
   Here an average of no update is the trained weights themselves: no swap while it holds none,
   and a checkpoint written then holds the weights as both its state_dict and its trained state.
---------------------------------------------------------------------------------------------
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor this rank holds (its shard of a DTensor): where an elementwise update works."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _tensor_copy(module: nn.Module) -> nn.Module:
    """A module tree of `module`'s shape holding only detached copies of its parameters and
    buffers: the same names, order and sharing (a tied weight stays one tensor), so
    `parameters()` / `buffers()` / `state_dict()` line up with `module`'s."""
    persistent = set(module.state_dict(keep_vars=True))
    copies: dict[int, nn.Module] = {}
    tensors: dict[int, torch.Tensor] = {}

    def copy(source: nn.Module, prefix: str) -> nn.Module:
        if id(source) in copies:
            return copies[id(source)]
        shadow = nn.Module()
        copies[id(source)] = shadow
        for name, param in source.named_parameters(recurse=False):
            if id(param) not in tensors:
                tensors[id(param)] = nn.Parameter(param.detach().clone(), requires_grad=False)
            shadow.register_parameter(name, tensors[id(param)])  # type: ignore[arg-type]
        for name, buffer in source.named_buffers(recurse=False):
            if id(buffer) not in tensors:
                tensors[id(buffer)] = buffer.detach().clone()
            shadow.register_buffer(
                name, tensors[id(buffer)], persistent=f"{prefix}{name}" in persistent
            )
        for name, child in source.named_children():
            shadow.add_module(name, copy(child, f"{prefix}{name}."))
        return shadow

    return copy(module, "")


def _named_tensors(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from module.named_parameters()
    yield from module.named_buffers()


@torch.no_grad()
def load_full_state(module: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy full (gathered) tensors into `module`'s parameters and buffers, each rank keeping
    its own shard of a sharded one; names `state` lacks (non-persistent buffers) stay."""
    for name, target in _named_tensors(module):
        if name not in state:
            continue
        source = state[name]
        if isinstance(target, DTensor):
            # Every rank read the same full tensor: each cuts its own shard, no communication.
            shard = distribute_tensor(
                source.to(target.device, target.dtype),
                target.device_mesh,
                target.placements,
                src_data_rank=None,
            )
            target.to_local().copy_(shard.to_local())
        else:
            target.copy_(source)


class PlacedAverage:
    """The averaged tensors of a module, built from it as the strategy placed it (see 1.) and
    updated by one fused step with a host-side count (see 2.). The decay is the caller's: it
    comes with each update.

    `module` holds the tensors in a module tree of the model's shape (its `state_dict()` is the
    averaged model's). `use_buffers=True`: floating buffers (BatchNorm running statistics) are
    averaged like the parameters; integer buffers (BatchNorm's batch counter) are copied. False:
    every buffer is copied from the model, as AveragedModel does."""

    def __init__(self, model: nn.Module, use_buffers: bool = True) -> None:
        self.module = _tensor_copy(model)
        self.use_buffers = use_buffers
        self.count = 0  # updates so far; on the host: read at every update, never from a device

    def _pairs(self, model: nn.Module) -> tuple[list[torch.Tensor], ...]:
        # Read from the module at every update (a layer replaced mid-run is averaged as it is
        # now); called under no_grad, so the weights need no detach.
        lerp_to: list[torch.Tensor] = []
        lerp_from: list[torch.Tensor] = []
        copy_to: list[torch.Tensor] = []
        copy_from: list[torch.Tensor] = []
        for mine, theirs, averaged in (
            (self.module.parameters(), model.parameters(), True),
            (self.module.buffers(), model.buffers(), self.use_buffers),
        ):
            for a, m in zip(mine, theirs, strict=True):
                if averaged and a.is_floating_point():
                    lerp_to.append(_local(a))
                    lerp_from.append(_local(m))
                else:
                    copy_to.append(_local(a))
                    copy_from.append(_local(m))
        return lerp_to, lerp_from, copy_to, copy_from

    @torch.no_grad()
    def update(self, model: nn.Module, decay: float) -> None:
        """Move every averaged tensor (1 - decay) of the way to `model`'s; the first update
        copies them."""
        lerp_to, lerp_from, copy_to, copy_from = self._pairs(model)
        if self.count == 0:  # the first update copies every tensor
            copy_to, copy_from = lerp_to + copy_to, lerp_from + copy_from
            lerp_to, lerp_from = [], []
        if lerp_to:
            torch._foreach_lerp_(lerp_to, lerp_from, 1.0 - decay)
        if copy_to:
            torch._foreach_copy_(copy_to, copy_from)
        self.count += 1

    def gathered_state(self) -> dict[str, torch.Tensor]:
        """The averaged module's state_dict with full tensors (a collective under FSDP2: every
        rank calls it)."""
        return {
            name: value.full_tensor().cpu() if isinstance(value, DTensor) else value
            for name, value in self.module.state_dict().items()
        }

    def load_gathered_state(self, state: Mapping[str, torch.Tensor], count: int) -> None:
        load_full_state(self.module, state)
        self.count = int(count)

    @torch.no_grad()
    def take(self, model: nn.Module, count: int) -> None:
        """Become `model`'s current values (bit for bit, shard by shard) after `count` updates."""
        for a, m in zip(_named_tensors(self.module), _named_tensors(model), strict=True):
            _local(a[1]).copy_(_local(m[1].detach()))
        self.count = int(count)

    @torch.no_grad()
    def swap(self, model: nn.Module) -> None:
        """Exchange the average's values and `model`'s, bit for bit."""
        for a, m in zip(_named_tensors(self.module), _named_tensors(model), strict=True):
            mine, theirs = _local(a[1]), _local(m[1].detach())
            held = mine.clone()
            mine.copy_(theirs)
            theirs.copy_(held)


# Lightning's checkpoint layout for a weight average (WeightAveraging.on_save_checkpoint): the
# average in `state_dict`, the trained weights and the update count beside it.
TRAINED = "current_model_state"
AVERAGING = "averaging_state"


def averaging_state(count: int) -> dict[str, Any]:
    """The `averaging_state` entry of an average of `count` updates (AveragedModel's name)."""
    return {"n_averaged": torch.tensor(count, dtype=torch.long)}


def saved_count(checkpoint: Mapping[str, Any]) -> int:
    """How many updates the average in `checkpoint` had (it must hold one)."""
    return int(checkpoint[AVERAGING]["n_averaged"])


def holds_average(checkpoint: Mapping[str, Any]) -> bool:
    """Whether `checkpoint`'s state_dict is a weight average (its trained weights beside it)."""
    return TRAINED in checkpoint and AVERAGING in checkpoint


def holds_updated_average(checkpoint: Mapping[str, Any]) -> bool:
    """Whether `checkpoint`'s state_dict is an average of at least one update (one of no update
    holds the trained weights, 5.)."""
    return holds_average(checkpoint) and saved_count(checkpoint) > 0
