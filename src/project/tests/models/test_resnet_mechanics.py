"""ResNet memory tricks that must not change the maths: checkpointing, norms, BN statistics."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch.plugins import TorchSyncBatchNorm
from torch import nn
from torch.utils.checkpoint import checkpoint
from torchvision.ops import FrozenBatchNorm2d

from project.models.resnet import ResNet18, _checkpoint_contexts

pytestmark = pytest.mark.example("project.models.resnet")

BN = nn.modules.batchnorm._BatchNorm


def _pair(norm: str = "batch") -> tuple[ResNet18, ResNet18]:
    torch.manual_seed(0)
    plain = ResNet18(norm=norm, width=8, grad_checkpointing=False)
    ckpt = ResNet18(norm=norm, width=8, grad_checkpointing=True)
    ckpt.load_state_dict(plain.state_dict())
    return plain, ckpt


def _step(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    net.train()
    nn.functional.cross_entropy(net(x), y).backward()
    return {n: p.grad.clone() for n, p in net.named_parameters()}


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(6, 3, 32, 32, generator=gen), torch.randint(0, 10, (6,), generator=gen)


def test_checkpointing_updates_bn_statistics_exactly_once(batch) -> None:
    # PyTorch #96136: the recompute in backward runs BN in train mode a second time.
    torch.use_deterministic_algorithms(True)
    try:
        plain, ckpt = _pair()
        _step(plain, *batch)
        _step(ckpt, *batch)
    finally:
        torch.use_deterministic_algorithms(False)
    plain_bn = {n: b for n, b in plain.named_buffers()}
    for name, buf in ckpt.named_buffers():
        if name.endswith("num_batches_tracked"):
            assert buf.item() == 1, name
        assert torch.equal(buf, plain_bn[name]), name


def test_checkpointing_gives_the_same_gradients(batch) -> None:
    torch.use_deterministic_algorithms(True)
    try:
        plain, ckpt = _pair()
        g_plain, g_ckpt = _step(plain, *batch), _step(ckpt, *batch)
    finally:
        torch.use_deterministic_algorithms(False)
    assert max((g_plain[k] - g_ckpt[k]).abs().max().item() for k in g_plain) <= 1e-6


def test_checkpointing_is_off_in_eval_and_under_no_grad(batch) -> None:
    _, ckpt = _pair()
    ckpt.eval()
    with torch.no_grad():
        out = ckpt(batch[0])
    assert out.shape == (6, 10)
    assert all(b.item() == 0 for n, b in ckpt.named_buffers() if n.endswith("num_batches_tracked"))


def test_recompute_reproduces_dropout_masks() -> None:
    # The BN-restoring recompute context must keep checkpoint's RNG replay: the recomputed
    # dropout mask has to be the one the forward used, or the gradient is for another network.
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Dropout(0.5), nn.Linear(32, 4))
    x = torch.randn(8, 16)

    def grads(use_checkpoint: bool) -> list[torch.Tensor]:
        block.zero_grad()
        torch.manual_seed(123)
        if use_checkpoint:
            out = checkpoint(block, x, use_reentrant=False, context_fn=_checkpoint_contexts(block))
        else:
            out = block(x)
        out.square().sum().backward()
        return [p.grad.clone() for p in block.parameters()]

    plain, recomputed = grads(False), grads(True)
    assert all(
        torch.allclose(a, b, atol=1e-6, rtol=0) for a, b in zip(plain, recomputed, strict=True)
    )


def test_frozen_norm_keeps_statistics_and_has_nothing_to_train(batch) -> None:
    net = ResNet18(norm="frozen", width=8)
    before = {n: b.clone() for n, b in net.named_buffers()}
    _step(net, *batch)
    assert not any(isinstance(m, BN) for m in net.modules())
    assert all(torch.equal(b, before[n]) for n, b in net.named_buffers())
    assert not any("bn" in n for n, _ in net.named_parameters())


def test_group_norm_has_no_batch_statistics() -> None:
    net = ResNet18(norm="group", width=8)
    assert not any(isinstance(m, BN) for m in net.modules())
    assert any(isinstance(m, nn.GroupNorm) for m in net.modules())


def test_sync_batchnorm_converts_batch_norm_but_not_frozen() -> None:
    # trainer.sync_batchnorm=true (trainer=ddp) makes Lightning apply this plugin under DDP.
    batch_net = TorchSyncBatchNorm().apply(ResNet18(norm="batch", width=8))
    assert any(isinstance(m, nn.SyncBatchNorm) for m in batch_net.modules())
    assert not any(type(m) is nn.BatchNorm2d for m in batch_net.modules())
    frozen_net = TorchSyncBatchNorm().apply(ResNet18(norm="frozen", width=8))
    assert any(isinstance(m, FrozenBatchNorm2d) for m in frozen_net.modules())
    assert not any(isinstance(m, nn.SyncBatchNorm) for m in frozen_net.modules())


@pytest.mark.slow
def test_compiled_checkpointing_updates_bn_statistics_once(batch) -> None:
    # Under torch.compile the stage is checkpointed without our context_fn (Dynamo refuses
    # one); the compiled graph must still update BN's running statistics exactly once.
    plain, ckpt = _pair()
    ckpt.compile()
    _step(plain, *batch)
    _step(ckpt, *batch)
    plain_bn = dict(plain.named_buffers())
    for name, buf in ckpt.named_buffers():
        if name.endswith("num_batches_tracked"):
            assert buf.item() == 1, name
        assert torch.allclose(buf.float(), plain_bn[name].float(), atol=1e-5, rtol=0), name


def test_forward_returns_logits() -> None:
    from project.tests.models.test_models import assert_logits

    torch.manual_seed(0)  # before the net is built: its initial weights decide the signs
    assert_logits(ResNet18(width=8), (5, 3, 32, 32))


@pytest.mark.parametrize("norm", ["batch", "group", "frozen"])
def test_resnet_norm_choices(norm: str) -> None:
    net = ResNet18(width=8, norm=norm)
    out = net(torch.randn(4, 3, 32, 32))
    assert out.shape == (4, 10)
    assert net.stem[0].kernel_size == (3, 3)
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in net.modules())


def test_resnet18_has_resnet18_size() -> None:
    params = sum(p.numel() for p in ResNet18().parameters())
    assert 11_000_000 < params < 11_300_000  # CIFAR ResNet-18: 11.17M parameters


def test_unknown_norm_is_refused() -> None:
    with pytest.raises(ValueError, match=r"batch\|group\|frozen"):
        ResNet18(norm="layer")
