"""Stage 09: the decoder (paper, section 3.1): N layers of masked self-attention, cross-attention over
the encoder's output (the "memory") and a feed-forward network, each in a sublayer connection."""
from __future__ import annotations

import torch  # noqa: F401 (the edited copies of these classes use it: tests/test_checks_stage09.py)
from torch import nn

from .feed_forward import PositionwiseFeedForward
from .multi_head_attention import MultiHeadAttention
from .residual_layer_norm import LayerNorm, SublayerConnection


class DecoderLayer(nn.Module):
    """x (B, Lt, d_model), memory (B, Ls, d_model) -> (B, Lt, d_model).

    Self-attention uses tgt_mask (B, 1, Lt, Lt), causal and padding; cross-attention takes its
    queries from x and its keys and values from memory, hiding source padding with src_mask (B, 1, 1, Ls).
    Example: layer = DecoderLayer(8, 2, 16, dropout=0.0)
             layer(torch.randn(1, 5, 8), torch.randn(1, 7, 8), None, causal_mask(5)).shape -> (1, 5, 8)
             layer.cross_attn.attn_weights.shape -> (1, 2, 5, 7), each target position over the source
             layer.self_attn.attn_weights[0, :, 0, 1:].sum().item() -> 0.0, position 0 sees only itself
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList([SublayerConnection(d_model, dropout, norm_first) for _ in range(3)])
        ### END SOLUTION

    def forward(self, x, memory, src_mask, tgt_mask):
        ### BEGIN SOLUTION
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))              # (B, Lt, d)
        x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, src_mask))   # (B, Lt, d)
        return self.sublayers[2](x, self.feed_forward)                                     # (B, Lt, d)
        ### END SOLUTION


class Decoder(nn.Module):
    """n_layers distinct DecoderLayers, then `norm` (LayerNorm when pre-norm, else nn.Identity).

    x (B, Lt, d_model), memory (B, Ls, d_model), src_mask (B, 1, 1, Ls), tgt_mask (B, 1, Lt, Lt)
    -> (B, Lt, d_model). Every layer reads the same memory (the encoder's last output) and both masks.
    Example: dec = Decoder(8, 2, 16, n_layers=3)
             dec(torch.randn(1, 5, 8), torch.randn(1, 7, 8), None, None).shape -> (1, 5, 8)
             len(dec.layers) -> 3, three DecoderLayers with weights of their own
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
                 norm_first: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.layers = nn.ModuleList([DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first)
                                     for _ in range(n_layers)])
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()
        ### END SOLUTION

    def forward(self, x, memory, src_mask, tgt_mask):
        ### BEGIN SOLUTION
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)
        ### END SOLUTION
