"""Stage 06: the position-wise feed-forward network (paper, section 3.3):

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2
"""
from __future__ import annotations

import torch
from torch import nn


class PositionwiseFeedForward(nn.Module):
    """The same two-layer ReLU network at every position: w_2(dropout(relu(w_1(x)))).

    (B, L, d_model) -> (B, L, d_ff) -> (B, L, d_model); the paper: d_model=512, d_ff=2048.
    Example: ffn = PositionwiseFeedForward(2, 3, dropout=0.0), its weights set by hand:
             w_1.weight = [[1, 0], [0, 1], [1, 1]], w_1.bias = [0, 0, -1]
             w_2.weight = [[1, 1, 1], [0, 0, 1]], w_2.bias = [0, 0]
             x = [1, -2]: w_1(x) = [1, -2, -2], relu -> [1, 0, 0], w_2 -> [1, 0]
             ffn(torch.randn(4, 7, 2)).shape -> (4, 7, 2), each of the 4 x 7 positions on its own
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        ### BEGIN SOLUTION
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        # (B, L, d_model) -> (B, L, d_ff) -> (B, L, d_model)
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))
        ### END SOLUTION
