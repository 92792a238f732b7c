"""Stage 07: layer normalization and the residual sublayer connection (paper, section 5.4):

    post-norm (the paper): LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm (a flag):     x + Dropout(Sublayer(LayerNorm(x)))
"""
from __future__ import annotations

import torch
from torch import nn


class LayerNorm(nn.Module):
    """Normalize each position's features to mean 0, variance 1 (biased), then scale and shift:
    weight * (x - mean) / sqrt(var + eps) + bias, over the last dimension. Equals nn.LayerNorm.

    Example: LayerNorm(2)(torch.tensor([[1., 3.]])) -> [[-1., 1.]] (approximately, eps aside)
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        ### BEGIN SOLUTION
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        centered = x - x.mean(dim=-1, keepdim=True)             # (..., d_model): x - mu
        # (..., 1), biased (divides by d) like nn.LayerNorm
        var = (centered ** 2).mean(dim=-1, keepdim=True)
        return self.weight * centered / torch.sqrt(var + self.eps) + self.bias
        ### END SOLUTION


class SublayerConnection(nn.Module):
    """Residual connection around `sublayer`, with layer norm after (post-norm) or before (pre-norm).

    forward(x (B, L, d_model), sublayer: callable (B, L, d_model) -> (B, L, d_model)) -> (B, L, d_model)
    Its norm is the LayerNorm of d_model features as built by default (eps 1e-5); x is left unchanged.
    Example: SublayerConnection(4, 0.0)(x, lambda y: 0 * y) == LayerNorm(4)(x)
    """

    def __init__(self, d_model: int, dropout: float = 0.1, norm_first: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first
        ### END SOLUTION

    def forward(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        ### BEGIN SOLUTION
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
        ### END SOLUTION
