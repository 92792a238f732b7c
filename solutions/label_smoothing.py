"""Stage 11: label smoothing (paper, section 5.4, epsilon_ls = 0.1)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .tokenization import PAD


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float = 0.1,
                        ignore_index: int = PAD) -> torch.Tensor:
    """Cross-entropy against the smoothed distribution: the target token gets 1 - epsilon, each of the
    other V - 1 tokens epsilon / (V - 1); averaged over positions whose target is not `ignore_index`.

    logits (..., V), target (...) -> a 0-dim tensor (0 when every target is padding); the inputs may be
    non-contiguous views (use reshape, not view) and are left unchanged.
    Example: V = 3, epsilon = 0.1, target 0 -> the distribution [0.9, 0.05, 0.05];
             uniform logits give log 3 = 1.0986 whatever the target.
    """
    ### BEGIN SOLUTION
    V = logits.size(-1)
    logp = F.log_softmax(logits.float(), dim=-1).reshape(-1, V)    # (N, V)
    target = target.reshape(-1)                                    # (N,)
    keep = target != ignore_index                                  # (N,)
    if not keep.any():
        return logits.sum() * 0.0  # no real token: zero, still connected to the graph
    logp, target = logp[keep], target[keep]                        # (n, V), (n,)
    nll = -logp.gather(1, target[:, None]).squeeze(1)              # -log p(target), (n,)
    others = -logp.sum(dim=1) - nll                                # -sum of log p over the other V-1 tokens
    loss = (1 - epsilon) * nll + epsilon / (V - 1) * others        # (n,)
    return loss.mean()
    ### END SOLUTION
