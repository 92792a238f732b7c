"""Stage 03: a numerically stable softmax and scaled dot-product attention (paper, section 3.2.1):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
"""
from __future__ import annotations

import math

import torch
from torch import nn


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x_i - max x) / sum_j exp(x_j - max x) along `dim`; never overflows.
    Keeps x's precision (float64 in, float64 out) and leaves x unchanged.

    Example: softmax(torch.tensor([1000., 1000.])) -> tensor([0.5, 0.5])
             (the naive exp(1000) is inf, and inf / inf is nan)
    """
    ### BEGIN SOLUTION
    shifted = x - x.amax(dim=dim, keepdim=True)  # the largest entry becomes 0, so exp <= 1
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)
    ### END SOLUTION


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 dropout: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, with `mask` (bool, True = may attend) applied before the softmax.

    q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v), mask broadcastable to (..., Lq, Lk)
    -> output (..., Lq, d_v), weights (..., Lq, Lk); each row of weights sums to 1 over the keys.
    A query whose keys are all masked gets finite weights (uniform), never NaN.

    Example: q = k = [[1., 0.], [0., 1.]], v = [[1.], [2.]], no mask
             scores = [[0.71, 0], [0, 0.71]], weights = [[0.67, 0.33], [0.33, 0.67]],
             output = [[1.33], [1.67]]
    """
    ### BEGIN SOLUTION
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., Lq, d_k) x (..., d_k, Lk) -> (..., Lq, Lk)
    if mask is not None:
        # a large finite negative, not -inf: a fully masked row then stays finite (uniform)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = softmax(scores, dim=-1)  # over the keys
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights  # (..., Lq, Lk) x (..., Lk, d_v) -> (..., Lq, d_v)
    ### END SOLUTION
