"""ResNet-18 for 32x32 images (CIFAR): 3x3 stem, no max-pool, four residual stages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torchvision.ops import FrozenBatchNorm2d

from trainwell.blocks.layers import BATCH_NORMS

NORMS = ("batch", "group", "frozen")


def make_norm(kind: str, channels: int) -> nn.Module:
    """`batch`: BatchNorm; `group`: GroupNorm (batch-size independent, safe under accumulation);
    `frozen`: BatchNorm with fixed statistics and affine (fine-tuning), immune to model.train()."""
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(min(32, channels), channels)
    if kind == "frozen":
        return FrozenBatchNorm2d(channels)
    raise ValueError(f"model.net.norm must be one of {'|'.join(NORMS)}, got {kind!r}")


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, norm: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = make_norm(norm, out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = make_norm(norm, out_ch)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), make_norm(norm, out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


@contextmanager
def _bn_stats_unchanged(module: nn.Module) -> Iterator[None]:
    """Restore every BatchNorm's running statistics after the block's recomputation.

    Non-reentrant checkpointing re-runs the forward during backward; in train mode BatchNorm would
    then update running_mean/var and num_batches_tracked a second time (PyTorch issue #96136),
    so eval would use statistics that drifted twice as fast as the model trained.
    """
    norms = [m for m in module.modules() if isinstance(m, BATCH_NORMS)]
    saved = [
        {name: buf.clone() for name, buf in m.named_buffers(recurse=False) if buf is not None}
        for m in norms
    ]
    try:
        yield
    finally:
        with torch.no_grad():
            for m, buffers in zip(norms, saved, strict=True):
                for name, value in buffers.items():
                    getattr(m, name).copy_(value)


def _checkpoint_contexts(module: nn.Module) -> Callable[[], tuple]:
    """(forward context, recompute context) for torch.utils.checkpoint's `context_fn`."""
    return lambda: (nullcontext(), _bn_stats_unchanged(module))


def _checkpointed(stage: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if torch.compiler.is_compiling():
        # Dynamo refuses a custom context_fn. It also does not need one: a compiled graph applies
        # BN's buffer updates once, in the forward graph, and recomputes only activations
        # (src/project/tests/models/test_resnet_mechanics.py checks the statistics under compile).
        return checkpoint(stage, x, use_reentrant=False)
    return checkpoint(stage, x, use_reentrant=False, context_fn=_checkpoint_contexts(stage))


class ResNet18(nn.Module):
    """CIFAR ResNet-18 returning raw logits.

    `grad_checkpointing=True` recomputes each residual stage in backward instead of storing its
    activations (less memory, ~30% more compute), without double-counting BatchNorm statistics.
    """

    def __init__(
        self,
        num_classes: int = 10,
        norm: str = "batch",
        grad_checkpointing: bool = False,
        width: int = 64,
        dropout: float = 0.0,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        self.norm = norm
        self.grad_checkpointing = grad_checkpointing
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            make_norm(norm, width),
            nn.ReLU(inplace=True),
        )
        widths = [width, 2 * width, 4 * width, 8 * width]
        stages, in_ch = [], width
        for i, out_ch in enumerate(widths):
            stride = 1 if i == 0 else 2
            stages.append(
                nn.Sequential(
                    BasicBlock(in_ch, out_ch, stride, norm), BasicBlock(out_ch, out_ch, 1, norm)
                )
            )
            in_ch = out_ch
        self.stages = nn.ModuleList(stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(in_ch, num_classes)

    def fsdp_units(self) -> list[nn.Module]:
        """The modules FSDP2 shards one by one (each residual block): one all-gather per block."""
        return [block for stage in self.stages for block in stage]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            if self.grad_checkpointing and self.training and torch.is_grad_enabled():
                x = _checkpointed(stage, x)
            else:
                x = stage(x)
        return self.fc(self.dropout(torch.flatten(self.pool(x), 1)))
