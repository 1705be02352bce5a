"""Lightning 2.6's WeightAveraging / EMAWeightAveraging and torch's AveragedModel, where the
template's EMA (callbacks/ema.py) needs them to behave otherwise.

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

import lightning as L
import torch
from lightning.pytorch.callbacks import EMAWeightAveraging
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.optim.swa_utils import AveragedModel


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


class PlacedAverage(AveragedModel):
    """An EMA of a module's weights, built from the module as the strategy placed it (see 1.)
    and updated by one fused step with a host-side count (see 2.).

    `use_buffers=True`: floating buffers (BatchNorm running statistics) are averaged like the
    parameters; integer buffers (BatchNorm's batch counter) are copied. False: every buffer is
    copied from the module, as AveragedModel does."""

    def __init__(self, module: nn.Module, decay: float, use_buffers: bool = True) -> None:
        # Not AveragedModel.__init__: it deep-copies the whole module (code, hooks, metrics,
        # FSDP2 state) where the tensors are all an average needs.
        nn.Module.__init__(self)
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"ema decay {decay} is not in [0, 1]")
        self.module = _tensor_copy(module)
        # On the host: the count is read at every update, never from a device.
        self.register_buffer("n_averaged", torch.tensor(0, dtype=torch.long))
        self.avg_fn = None
        self.multi_avg_fn = None
        self.use_buffers = use_buffers
        self.decay = decay
        self.count = 0

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
    def update_parameters(self, model: nn.Module) -> None:
        lerp_to, lerp_from, copy_to, copy_from = self._pairs(model)
        if self.count == 0:
            lerp_to, lerp_from, copy_to, copy_from = (
                [],
                [],
                lerp_to + copy_to,
                lerp_from + copy_from,
            )
        if lerp_to:
            torch._foreach_lerp_(lerp_to, lerp_from, 1.0 - self.decay)
        if copy_to:
            torch._foreach_copy_(copy_to, copy_from)
        self.count += 1
        self.n_averaged.fill_(self.count)

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
        self.n_averaged.fill_(self.count)

    @torch.no_grad()
    def take(self, model: nn.Module, count: int) -> None:
        """Become `model`'s current values (bit for bit, shard by shard) after `count` updates."""
        for a, m in zip(_named_tensors(self.module), _named_tensors(model), strict=True):
            _local(a[1]).copy_(_local(m[1].detach()))
        self.count = int(count)
        self.n_averaged.fill_(self.count)

    @torch.no_grad()
    def swap(self, model: nn.Module) -> None:
        """Exchange the average's values and `model`'s, bit for bit."""
        for a, m in zip(_named_tensors(self.module), _named_tensors(model), strict=True):
            mine, theirs = _local(a[1]), _local(m[1].detach())
            held = mine.clone()
            mine.copy_(theirs)
            theirs.copy_(held)


class PlacedEMAWeightAveraging(EMAWeightAveraging):
    """Lightning's EMAWeightAveraging with 1.-3. corrected (and FSDP2 checkpoints gathered and
    scattered); everything else, the update schedule included, is Lightning's. The template's
    callback (callbacks/ema.py) adds its configuration on top."""

    def __init__(self, decay: float, use_buffers: bool = True, **kwargs: Any) -> None:
        super().__init__(decay=decay, use_buffers=use_buffers, **kwargs)
        self._decay = decay
        self._pending: tuple[Mapping[str, torch.Tensor], int] | None = None
        self._ended = False  # after training: the module holds the average, the average the weights

    @property
    def average(self) -> PlacedAverage | None:
        return self._average_model  # type: ignore[return-value]

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":  # built at on_fit_start, once the strategy placed the module (1.)
            self._average_model = None
            self._ended = False

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        average = PlacedAverage(pl_module, self._decay, self._use_buffers)
        self._average_model = average
        if self._pending is not None:  # restored before the strategy placed the module
            average.load_gathered_state(*self._pending)
            self._pending = None

    def _swap_during_fit(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Fit only: after fit the module holds the average already (a trainer.validate()).
        average = self.average
        if average is not None and average.count and trainer.state.fn == TrainerFn.FITTING:
            average.swap(pl_module)  # none before the first update (5.)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._swap_during_fit(trainer, pl_module)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._swap_during_fit(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        average = self.average
        if average is not None and average.count and not self._ended:
            average.swap(pl_module)  # not a copy: the trained weights stay (3.); none unused (5.)
            self._ended = True

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        module_state = dict(checkpoint["state_dict"])
        average = self.average
        if average is None or not average.count:
            # Before the average exists (a checkpoint written before training) or before its
            # first update (5.): the weights.
            averaged, trained, count = module_state, module_state, 0
        else:
            held = {**module_state, **average.gathered_state()}  # every rank (FSDP2: collective)
            averaged, trained = (module_state, held) if self._ended else (held, module_state)
            count = average.count
        checkpoint["state_dict"] = averaged
        checkpoint[TRAINED] = trained
        checkpoint[AVERAGING] = {"n_averaged": torch.tensor(count, dtype=torch.long)}

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return  # test / validate / predict use the checkpoint's state_dict: the average (4.)
        if not holds_average(checkpoint):
            return  # the average starts from the loaded weights at the first update
        # Lightning has loaded the average (`state_dict`) into the module: the average takes it,
        # and training goes on from the trained weights.
        count = int(checkpoint[AVERAGING]["n_averaged"])
        average = self.average
        if average is None:  # DDP / one device: the strategy places the module after this
            self._pending = (checkpoint["state_dict"], count)
        else:
            # FSDP2: restored once the module is sharded and the average built; the strategy
            # loaded `state_dict` into the shards and removed it from the checkpoint.
            average.take(pl_module, count)
        load_full_state(pl_module, checkpoint[TRAINED])


# The checkpoint keys Lightning's WeightAveraging writes beside `state_dict` (the average).
TRAINED = "current_model_state"
AVERAGING = "averaging_state"


def holds_average(checkpoint: Mapping[str, Any]) -> bool:
    """Whether `checkpoint`'s state_dict is a weight average (its trained weights beside it)."""
    return TRAINED in checkpoint and AVERAGING in checkpoint


def holds_updated_average(checkpoint: Mapping[str, Any]) -> bool:
    """Whether `checkpoint`'s state_dict is an average of at least one update (one of no update
    holds the trained weights, 5.)."""
    return holds_average(checkpoint) and int(checkpoint[AVERAGING]["n_averaged"]) > 0
