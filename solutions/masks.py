"""Stage 05: attention masks. Bool tensors, True = "may attend", shaped to broadcast to (B, h, Lq, Lk)."""
from __future__ import annotations

import torch

from .tokenization import PAD


def padding_mask(ids: torch.Tensor, pad_id: int = PAD) -> torch.Tensor:
    """(B, L) token ids -> (B, 1, 1, L): True at real tokens. It masks keys, for every query and head.
    A bool tensor on the ids' device; the ids are left unchanged.

    Example: [[5, 6, 0]] -> [[[[True, True, False]]]]
    """
    ### BEGIN SOLUTION
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, L)
    ### END SOLUTION


def causal_mask(size: int, device=None) -> torch.Tensor:
    """(1, 1, size, size): position i may attend to positions 0..i (on and below the diagonal).

    Example: causal_mask(3)[0, 0] -> [[T, F, F], [T, T, F], [T, T, T]]
    """
    ### BEGIN SOLUTION
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]  # (1, 1, size, size)
    ### END SOLUTION


def target_mask(tgt_ids: torch.Tensor, pad_id: int = PAD) -> torch.Tensor:
    """(B, L) decoder input ids -> (B, 1, L, L): causal AND not padding (on the keys), i.e.
    the padding mask and the causal mask of length L, combined with &; bool, the ids left unchanged.

    Example: [[1, 7, 0]] -> [[[[T, F, F], [T, T, F], [T, T, F]]]]
    """
    ### BEGIN SOLUTION
    L = tgt_ids.size(1)
    # (B,1,1,L) & (1,1,L,L) -> (B,1,L,L)
    return padding_mask(tgt_ids, pad_id) & causal_mask(L, tgt_ids.device)
    ### END SOLUTION
