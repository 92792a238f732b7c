"""Stage 02: the sinusoidal positional encoding of the paper (section 3.5)."""
from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """The table PE (max_len, d_model):
    PE[pos, 2i] = sin(pos / 10000^(2i/d_model)),  PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)).

    Example: sinusoidal_encoding(2, 4) -> [[0, 1, 0, 1], [sin 1, cos 1, sin 0.01, cos 0.01]]
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even for the sinusoidal table (sin and cos pairs), got {d_model}")
    ### BEGIN SOLUTION
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)             # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)                  # (d_model/2,)
    inv_freq = torch.exp(-math.log(10000.0) * two_i / d_model)                # 1 / 10000^(2i/d_model)
    angle = pos * inv_freq                                                    # (max_len, d_model/2)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe
    ### END SOLUTION


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to embeddings, then dropout: dropout(x + PE[:L]).

    The table is a buffer (moves with .to(device), is not trained). Example:
    PositionalEncoding(4, max_len=10, dropout=0.0)(torch.zeros(1, 2, 4))[0] == sinusoidal_encoding(2, 4)
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.1):
        super().__init__()
        ### BEGIN SOLUTION
        self.dropout = nn.Dropout(dropout)
        # (max_len, d_model)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, L, d_model) -> (B, L, d_model), in x's dtype (float64 x, float64 out); x unchanged."""
        if x.size(1) > self.pe.size(0):
            raise ValueError(f"sequence of length {x.size(1)} is longer than max_len={self.pe.size(0)} "
                             "of the positional encoding; build it with a larger max_len")
        ### BEGIN SOLUTION
        return self.dropout(x + self.pe[: x.size(1)].to(x.dtype))  # (B, L, d) + (L, d) broadcasts over B
        ### END SOLUTION


class LearnedPositionalEncoding(nn.Module):
    """Learned positions instead of the table (the paper's Table 3 row (E), after Gehring et al. 2017):
    dropout(x + P[:L]) with P a trained (max_len, d_model) matrix, the interface of PositionalEncoding.

    Not part of the contract and not a stub in any lesson: lesson 15 uses it through
    Config(positional="learned"). `embedding` is an nn.Embedding(max_len, d_model), so its weights copy to and
    from PyTorch's own position embeddings. Initialized N(0, d_model^-0.5), like the token embeddings before
    their sqrt(d_model) scale.
    Example: LearnedPositionalEncoding(4, max_len=10, dropout=0.0)(torch.zeros(1, 2, 4))[0]
    == embedding.weight[:2]
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.embedding = nn.Embedding(max_len, d_model)                     # (max_len, d_model), trained
        nn.init.normal_(self.embedding.weight, 0.0, d_model ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, L, d_model) -> (B, L, d_model)."""
        max_len = self.embedding.num_embeddings
        if x.size(1) > max_len:
            raise ValueError(f"sequence of length {x.size(1)} is longer than max_len={max_len} "
                             "of the learned positional encoding; build it with a larger max_len")
        positions = torch.arange(x.size(1), device=x.device)                # (L,)
        return self.dropout(x + self.embedding(positions).to(x.dtype))      # (B, L, d) + (L, d)
