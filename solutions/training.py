"""Stage 12: training. Teacher forcing (the decoder input is the target shifted right), batches of
similar lengths, the warmup learning-rate schedule and Adam of the paper (section 5.3)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .masks import padding_mask, target_mask
from .tokenization import BOS, EOS, PAD, pad_sequences


def shift_right(tgt: torch.Tensor, bos_id: int = BOS, pad_id: int = PAD) -> torch.Tensor:
    """(B, L) -> (B, L): <bos> in front, the last column dropped. The decoder reads position t-1
    to predict position t (teacher forcing).

    Example: [[5, 6, 2]] -> [[1, 5, 6]]
    """
    ### BEGIN SOLUTION
    bos = torch.full_like(tgt[:, :1], bos_id)  # (B, 1)
    return torch.cat([bos, tgt[:, :-1]], dim=1)  # (B, L)
    ### END SOLUTION


@dataclass
class Batch:
    """One training batch. src (B, Ls); tgt_in = <bos> y (B, Lt); tgt_out = y <eos> (B, Lt);
    src_mask (B, 1, 1, Ls); tgt_mask (B, 1, Lt, Lt); n_tokens = real tokens of tgt_out."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_mask: torch.Tensor
    tgt_mask: torch.Tensor
    n_tokens: int

    def to(self, device) -> "Batch":
        return Batch(*(t.to(device, non_blocking=True) for t in
                       (self.src, self.tgt_in, self.tgt_out, self.src_mask, self.tgt_mask)), self.n_tokens)


def make_batch(src_seqs, tgt_seqs, pad_id: int = PAD, bos_id: int = BOS, eos_id: int = EOS) -> Batch:
    """A Batch from lists of token-id lists (no specials in them); n_tokens is a Python int.

    Example: src [[5, 6]], tgt [[7, 8]] -> src [[5, 6]], tgt_in [[1, 7, 8]], tgt_out [[7, 8, 2]], n_tokens 3
    """
    if len(src_seqs) == 0 or len(src_seqs) != len(tgt_seqs):
        raise ValueError(f"make_batch needs as many sources as targets, at least one: got {len(src_seqs)} "
                         f"sources and {len(tgt_seqs)} targets")
    ### BEGIN SOLUTION
    src = pad_sequences(src_seqs, pad_id)                                    # (B, Ls)
    tgt_in = pad_sequences([[bos_id] + list(t) for t in tgt_seqs], pad_id)   # (B, Lt): <bos> y
    tgt_out = pad_sequences([list(t) + [eos_id] for t in tgt_seqs], pad_id)  # (B, Lt): y <eos>
    return Batch(src, tgt_in, tgt_out, padding_mask(src, pad_id), target_mask(tgt_in, pad_id),
                 int((tgt_out != pad_id).sum()))
    ### END SOLUTION


def batch_by_tokens(lengths, max_tokens: int) -> list[list[int]]:
    """Group example indices into batches of similar length whose padded size (longest x count)
    stays within max_tokens; an example longer than max_tokens stands alone. Every index appears once.

    Example: lengths [5, 1, 4, 2], max_tokens 8 -> [[1, 3], [2], [0]]  (sorted lengths 1, 2 | 4 | 5)
    """
    ### BEGIN SOLUTION
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current, longest = [], [], 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if current and new_longest * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, new_longest = [], lengths[i]
        current.append(i)
        longest = new_longest
    if current:
        batches.append(current)
    return batches
    ### END SOLUTION


def noam_lr(step: int, d_model: int, warmup_steps: int = 4000, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), step 0 counted as 1:
    linear warmup, then decay with the inverse square root of the step (paper, equation 3).

    Returns a Python float (not a tensor or numpy number): LambdaLR multiplies lr=1.0 by it.
    Example: noam_lr(4000, 512) = 512^-0.5 * 4000^-0.5 = 0.000699, the peak
    """
    ### BEGIN SOLUTION
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
    ### END SOLUTION


def make_optimizer(model: torch.nn.Module, d_model: int, warmup_steps: int = 4000, factor: float = 1.0):
    """Adam(betas=(0.9, 0.98), eps=1e-9) and a LambdaLR scheduler, stepped after each optimizer step,
    such that the k-th optimizer step (k = 1, 2, ...) runs at noam_lr(k, d_model, warmup_steps, factor).

    Example: opt, sched = make_optimizer(model, 512); opt.param_groups[0]["lr"] == noam_lr(1, 512)
    """
    ### BEGIN SOLUTION
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    # LambdaLR multiplies lr=1.0 by lambda(number of scheduler steps so far), so step k uses lambda(k - 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: noam_lr(s + 1, d_model, warmup_steps, factor))
    return optimizer, scheduler
    ### END SOLUTION
