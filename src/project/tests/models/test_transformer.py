"""CausalTransformer: causal, blind to right padding, checkpointing changes memory only."""

from __future__ import annotations

import pytest
import torch

from project.models.transformer import CausalTransformer

pytestmark = pytest.mark.example("project.models.transformer")


def _net(**kwargs) -> CausalTransformer:
    torch.manual_seed(0)
    return CausalTransformer(
        **{"vocab_size": 11, "max_len": 16, "dim": 16, "dropout": 0.0, **kwargs}
    )


def test_logits_shape_and_causality() -> None:
    net = _net().eval()
    tokens = torch.randint(0, 11, (3, 9), generator=torch.Generator().manual_seed(1))
    logits = net(tokens)
    assert logits.shape == (3, 9, 11)
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 11  # rewrite the future from position 5 on
    later = net(changed)
    assert torch.allclose(logits[:, :5], later[:, :5], atol=1e-6)
    assert not torch.allclose(logits[:, 5:], later[:, 5:], atol=1e-3)


def test_right_padding_leaves_real_positions_unchanged() -> None:
    net = _net().eval()
    seq = torch.tensor([[1, 4, 5, 6]])
    padded = torch.cat([seq, torch.zeros(1, 7, dtype=torch.long)], dim=1)
    assert torch.allclose(net(seq), net(padded)[:, :4], atol=1e-6)


def test_gradient_checkpointing_gives_the_same_gradients() -> None:
    tokens = torch.randint(0, 11, (4, 12), generator=torch.Generator().manual_seed(2))
    grads = []
    for flag in (False, True):
        net = _net(grad_checkpointing=flag, depth=3)
        net(tokens).logsumexp(-1).mean().backward()
        grads.append({n: p.grad.clone() for n, p in net.named_parameters()})
    assert max((grads[0][n] - grads[1][n]).abs().max().item() for n in grads[0]) <= 1e-6


def test_too_long_input_and_bad_heads_are_named() -> None:
    with pytest.raises(ValueError, match="max_len=16"):
        _net()(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"multiple of model\.net\.heads"):
        _net(dim=10, heads=4)
