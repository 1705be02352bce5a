"""FSDP2 (`fully_shard`) through Lightning's ModelParallelStrategy, configured from trainer=fsdp.

Lightning's FSDPStrategy wraps modules with FSDP1 and refuses CPU; ModelParallelStrategy leaves
the wrapping to the LightningModule's `configure_model`, where the task calls `shard(net)`:
`fully_shard` on each unit the net names (`fsdp_units()`: a ResNet's residual blocks, say), then on
the root. Works on CPU ranks over gloo (tests) as on GPUs over NCCL.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn

from trainwell import compat
from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_state import decode_state, numpy_allowed
from trainwell.io.hparams import plain_checkpoint

_DTYPES = {None: None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class FSDP2Strategy(ModelParallelStrategy):
    """Pure data parallelism with FSDP2: every rank holds 1/world of the parameters.

    Args:
        reshard_after_forward: free the gathered parameters after forward (ZeRO-3 memory) or keep
            them until backward (ZeRO-2: less communication, more memory).
        param_dtype / reduce_dtype: FSDP2 mixed precision (`bf16`, `fp16`, `fp32` or null: off).
        activation_checkpointing: turn on the net's own `grad_checkpointing`.
        save_distributed_checkpoint: false writes one ordinary .ckpt (same keys as without FSDP,
            so eval.py and a non-sharded resume read it); true writes a sharded directory.
    """

    def __init__(
        self,
        reshard_after_forward: bool = True,
        param_dtype: Literal["bf16", "fp16", "fp32"] | None = None,
        reduce_dtype: Literal["bf16", "fp16", "fp32"] | None = None,
        activation_checkpointing: bool = False,
        save_distributed_checkpoint: bool = False,
        **kwargs: Any,
    ) -> None:
        for name, value in (("param_dtype", param_dtype), ("reduce_dtype", reduce_dtype)):
            if value not in _DTYPES:
                raise TrainwellError(
                    f"trainer.strategy.{name}={value!r} is not one of bf16|fp16|fp32|null"
                )
        kwargs.setdefault("tensor_parallel_size", 1)
        super().__init__(save_distributed_checkpoint=save_distributed_checkpoint, **kwargs)
        self.reshard_after_forward = reshard_after_forward
        self.param_dtype = _DTYPES[param_dtype]
        self.reduce_dtype = _DTYPES[reduce_dtype]
        self.activation_checkpointing = activation_checkpointing
        self.save_distributed = save_distributed_checkpoint

    def save_checkpoint(
        self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any | None = None
    ) -> None:
        if self.save_distributed and getattr(self.checkpoint_io, "rehearsal", None) is not None:
            # The step-0 check of a sharded save: what goes into `meta.pt` (everything but the
            # shards, which hold tensors only) through the checkpoint IO's rehearsal.
            if self.is_global_zero:
                meta = {k: v for k, v in checkpoint.items() if k != "optimizer_states"}
                self.checkpoint_io.save_checkpoint({**meta, "state_dict": {}}, filepath)
            return
        if self.save_distributed:
            # Lightning writes a sharded checkpoint's `meta.pt` with its own torch.save, past the
            # checkpoint IO where every other checkpoint gets plain data: a module that saved
            # objects as hyper-parameters, or a datamodule keeping numpy statistics, would leave
            # a meta.pt that only an unpickling load (weights_only=False) reads, and resume, eval
            # and the doctor refuse it.
            config = getattr(self.checkpoint_io, "hparams_config", None)
            checkpoint, _ = plain_checkpoint(checkpoint, config)
        super().save_checkpoint(checkpoint, filepath, storage_options)

    def setup_environment(self) -> None:
        # ModelParallelStrategy's "auto" makes data parallel = number of nodes (it assumes tensor
        # parallelism inside a node); pure FSDP shards over every rank.
        if self._data_parallel_size == "auto":
            self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> Any:
        # Lightning reads the file (or meta.pt) with its own torch.load, past the checkpoint IO:
        # numpy values are allowed and the state saved as data is turned back into its values
        # here, as io/checkpoint_read.py does for every other load.
        with numpy_allowed():
            loaded = compat.load_model_parallel_checkpoint(
                self, checkpoint_path, super().load_checkpoint, weights_only
            )
        return decode_state(loaded)

    def shard(self, net: nn.Module) -> None:
        """fully_shard each unit of `net`, then `net` itself, over the data-parallel mesh."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if self.activation_checkpointing:
            if not hasattr(net, "grad_checkpointing"):
                raise TrainwellError(
                    f"{type(net).__name__} has no grad_checkpointing switch; set "
                    "trainer.strategy.activation_checkpointing=false"
                )
            net.grad_checkpointing = True
        options: dict[str, Any] = {
            "mesh": self.device_mesh["data_parallel"],
            "reshard_after_forward": self.reshard_after_forward,
            "mp_policy": MixedPrecisionPolicy(
                param_dtype=self.param_dtype, reduce_dtype=self.reduce_dtype
            ),
        }
        units = net.fsdp_units() if hasattr(net, "fsdp_units") else []
        for unit in units:
            fully_shard(unit, **options)
        fully_shard(net, **options)
