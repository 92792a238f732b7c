"""Stage 04: multi-head attention (paper, section 3.2.2):

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
"""
from __future__ import annotations

import torch
from torch import nn

from .attention import scaled_dot_product_attention


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, L, d_model) -> (B, h, L, d_k) with d_k = d_model / h: head i gets features i*d_k .. (i+1)*d_k-1.

    Example: x of shape (2, 5, 8), n_heads=2 -> shape (2, 2, 5, 4), and out[:, 1] == x[..., 4:8]
    """
    B, L, d_model = x.shape
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    ### BEGIN SOLUTION
    return x.view(B, L, n_heads, d_model // n_heads).transpose(1, 2)  # (B, L, h, d_k) -> (B, h, L, d_k)
    ### END SOLUTION


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, L, d_k) -> (B, L, h * d_k), the inverse of split_heads.

    Example: merge_heads(split_heads(x, 2)) == x
    """
    ### BEGIN SOLUTION
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)  # (B, L, h, d_k) -> (B, L, d_model)
    ### END SOLUTION


class MultiHeadAttention(nn.Module):
    """h attention heads over learned projections w_q, w_k, w_v, then the output projection w_o.

    forward(query (B, Lq, d_model), key (B, Lk, d_model), value (B, Lk, d_model), mask) -> (B, Lq, d_model);
    mask is bool (True = may attend), broadcastable to (B, h, Lq, Lk). Keeps the last weights in
    `attn_weights` (B, h, Lq, Lk). Example: MultiHeadAttention(8, 2)(x, x, x).shape == x.shape
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}: "
                             "each head gets d_model / n_heads features")
        ### BEGIN SOLUTION
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attn_weights = None
        ### END SOLUTION

    def forward(self, query, key, value, mask=None):
        ### BEGIN SOLUTION
        q = split_heads(self.w_q(query), self.h)  # (B, h, Lq, d_k)
        k = split_heads(self.w_k(key), self.h)    # (B, h, Lk, d_k)
        v = split_heads(self.w_v(value), self.h)  # (B, h, Lk, d_k)
        out, self.attn_weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)  # (B, h, Lq, d_k)
        return self.w_o(merge_heads(out))  # (B, Lq, d_model)
        ### END SOLUTION
