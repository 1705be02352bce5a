"""A small causal (decoder-only) Transformer: token ids in, next-token logits out."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"model.net.dim={dim} must be a multiple of model.net.heads={heads}")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        # The attention-dropout rate lives in an nn.Dropout (applied inside the fused kernel):
        # whatever switches dropout modules off (p=0, as exact-gradient checks do) reaches it.
        self.attn_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            is_causal=True,
            dropout_p=self.attn_drop.p if self.training else 0.0,
        )
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm residual block; GELU keeps the net smooth (no ReLU kink to flip between two
    summation orders of the same gradient)."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.mlp(self.norm2(x)))


class CausalTransformer(nn.Module):
    """Embedding + learned positions, `depth` pre-norm blocks, a final norm and a linear head.

    forward(tokens [batch, time]) -> logits [batch, time, vocab_size]; position t sees tokens
    0..t only, so right padding never changes a real position's logits. No key-padding mask is
    needed for that reason (and none is taken).

    `grad_checkpointing=True` recomputes each block in backward instead of storing its
    activations (no BatchNorm here, so recomputation has no side effect to undo).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int = 64,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        dropout: float = 0.1,
        grad_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        self.max_len = max_len
        self.grad_checkpointing = grad_checkpointing
        self.embed = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(max_len, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        # GPT-2's small-std init: with PyTorch's default Embedding init (std 1) the first logits
        # are large and the loss starts far above ln(vocab).
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if t > self.max_len:
            raise ValueError(
                f"a batch of {t} positions is longer than model.net.max_len={self.max_len}"
            )
        positions = torch.arange(t, device=tokens.device)
        x = self.drop(self.embed(tokens) + self.position(positions))
        for block in self.blocks:
            if self.grad_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.norm(x))
