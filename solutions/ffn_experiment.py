"""Given, not for you to write: lesson 06's experiment on what a layer loses without its feed-forward network.

Every position of a sequence holds a point (x1, x2) drawn from N(0, 1), on its own (8 positions, nothing to
learn from the others), and the model must output x1 * x2 at every position. A one-layer model of width 16:
a linear map in, multi-head attention with its residual and LayerNorm, then (or not) the position-wise
feed-forward network with its own, and a linear map out, trained with Adam for a few hundred steps. The score
is the fraction of the target's variance left unexplained on fresh points: 0 is perfect, 1 is no better than
the mean.

It measures one small model on one function; it does not say how much the network matters at the paper's scale
(most of a layer's parameters: lesson 06's count).

Example: unexplained(PositionwiseFeedForward, with_ffn=True)  -> about 0.005
         unexplained(PositionwiseFeedForward, with_ffn=False) -> about 0.17 (seeds 0 and 1)
"""
from __future__ import annotations

import torch
from torch import nn

from .multi_head_attention import MultiHeadAttention


class OneLayer(nn.Module):
    """in (2 -> d_model), attention sublayer, feed-forward sublayer when `feed_forward` is given,
    out (d_model -> 1)."""

    def __init__(self, feed_forward: nn.Module | None, d_model: int = 16, norm_first: bool = False):
        super().__init__()
        self.inp, self.out = nn.Linear(2, d_model), nn.Linear(d_model, 1)
        self.attn = MultiHeadAttention(d_model, 2, dropout=0.0)
        self.feed_forward = feed_forward
        # lesson 07's sublayer connection, written out with PyTorch's LayerNorm (lesson 06 comes before it)
        self.norms, self.norm_first = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(2)]), norm_first

    def _sublayer(self, i: int, x: torch.Tensor, sublayer) -> torch.Tensor:
        if self.norm_first:
            return x + sublayer(self.norms[i](x))                # pre-norm
        return self.norms[i](x + sublayer(x))                    # post-norm, the paper's

    def forward(self, x: torch.Tensor) -> torch.Tensor:          # (B, L, 2) -> (B, L)
        h = self._sublayer(0, self.inp(x), lambda y: self.attn(y, y, y))
        if self.feed_forward is not None:
            h = self._sublayer(1, h, self.feed_forward)
        return self.out(h)[..., 0]


def unexplained(feed_forward_class, with_ffn: bool, seed: int = 0, steps: int = 300, d_model: int = 16,
                norm_first: bool = False) -> float:
    """Train a OneLayer (with `feed_forward_class(d_model, 4 * d_model, dropout=0.0)` or none) to output x1 *
    x2, and return the fraction of the target's variance it leaves unexplained on 4,000 fresh points."""
    torch.manual_seed(seed)
    ffn = feed_forward_class(d_model, 4 * d_model, dropout=0.0) if with_ffn else None
    model = OneLayer(ffn, d_model, norm_first)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        x = torch.randn(64, 8, 2)                                  # (B, L, 2): 8 positions, each on its own
        loss = ((model(x) - x[..., 0] * x[..., 1]) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        x = torch.randn(500, 8, 2)
        y = x[..., 0] * x[..., 1]
        return (((model(x) - y) ** 2).mean() / y.var()).item()
