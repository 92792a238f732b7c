"""Stage 08: the encoder (paper, section 3.1): N identical layers, each self-attention then a
feed-forward network, each wrapped in a residual sublayer connection."""
from __future__ import annotations

import torch
from torch import nn

from .feed_forward import PositionwiseFeedForward
from .multi_head_attention import MultiHeadAttention
from .residual_layer_norm import LayerNorm, SublayerConnection


class EncoderLayer(nn.Module):
    """x -> sublayers[0](x, self-attention) -> sublayers[1](., feed-forward); shape (B, L, d_model) kept.

    src_mask (B, 1, 1, L) hides padding keys. Example: EncoderLayer(8, 2, 16)(x, None).shape == x.shape
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList([SublayerConnection(d_model, dropout, norm_first) for _ in range(2)])
        ### END SOLUTION

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        ### BEGIN SOLUTION
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask))  # (B, L, d_model)
        return self.sublayers[1](x, self.feed_forward)                         # (B, L, d_model)
        ### END SOLUTION


class Encoder(nn.Module):
    """n_layers distinct EncoderLayers, then `norm`: a LayerNorm when pre-norm (the last layer's output
    is otherwise never normalized), nn.Identity when post-norm (each layer already ends normalized).

    Example: Encoder(8, 2, 16, 3)(x, None).shape == x.shape
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
                 norm_first: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first)
                                     for _ in range(n_layers)])
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()
        ### END SOLUTION

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        ### BEGIN SOLUTION
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)
        ### END SOLUTION
